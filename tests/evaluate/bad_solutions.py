"""A tiny definition and the deliberately bad solutions the engine must contain and classify."""

from __future__ import annotations

from pathlib import Path

from kernelarena.data import (
    AxisVar,
    BuildSpec,
    Definition,
    RandomInput,
    ScalarInput,
    Solution,
    SourceFile,
    Status,
    TensorSpec,
    TraceSet,
    Workload,
)

FIXTURES = Path(__file__).parent.parent / "fixtures" / "bad_solutions"

DEFINITION = Definition(
    name="vector_scale",
    op_type="test",
    axes={"n": AxisVar(type="var")},
    inputs={
        "x": TensorSpec(shape=["n"], dtype="float32"),
        "factor": TensorSpec(shape=None, dtype="float32"),
    },
    outputs={"out": TensorSpec(shape=["n"], dtype="float32")},
    reference="import torch\n\n\ndef run(x, factor):\n    return x * factor\n",
    bytes_moved="nbytes('x') + nbytes('out')",
)

# solution file -> (expected status, destination-passing style, a phrase the log must contain)
CPU_CASES: dict[str, tuple[Status, bool, str]] = {
    "good": (Status.PASSED, True, ""),
    "raises": (Status.RUNTIME_ERROR, True, "this solution always raises"),
    "segfault": (Status.RUNTIME_ERROR, True, "SIGSEGV"),
    "hangs": (Status.TIMEOUT, True, "took longer than"),
    "wrong_shape": (Status.INCORRECT_SHAPE, False, "has shape"),
    "wrong_dtype": (Status.INCORRECT_DTYPE, False, "has dtype torch.float64"),
    "returns_nan": (Status.INCORRECT_NUMERICAL, True, "NaN"),
    "half_written": (Status.INCORRECT_NUMERICAL, True, "mismatch"),
    "mutates_input": (Status.INCORRECT_NUMERICAL, True, "input 'x' was modified"),
    "caches_output": (Status.INCORRECT_NUMERICAL, True, "reuses results across calls"),
    "syntax_error": (Status.COMPILE_ERROR, True, "SyntaxError"),
}
GPU_CASES: dict[str, tuple[Status, bool, str]] = {
    **CPU_CASES,
    "illegal_memory": (Status.RUNTIME_ERROR, True, "illegal memory access"),
    "out_of_memory": (Status.RUNTIME_ERROR, True, "out of memory"),
}


def solution(
    stem: str, destination_passing_style: bool, name: str | None = None, folder: Path = FIXTURES
) -> Solution:
    return Solution(
        name=name or f"vector_scale_{stem}",
        definition=DEFINITION.name,
        author="tests",
        spec=BuildSpec(
            language="python",
            target_hardware=["cpu", "cuda"],
            entry_point=f"{stem}.py::run",
            destination_passing_style=destination_passing_style,
        ),
        sources=[SourceFile(path=f"{stem}.py", content=(folder / f"{stem}.py").read_text())],
    )


def trace_set(
    cases: dict[str, tuple[Status, bool, str]],
    root: Path | None = None,
    sizes: tuple[int, ...] = (1000,),
    folders: tuple[Path, ...] = (FIXTURES,),
) -> TraceSet:
    """The definition, a good solution first and last, every bad one in between (each found in
    the first of ``folders`` that has it)."""
    made = TraceSet(root=root)
    made.add_definition(DEFINITION)
    made.add_solution(solution("good", True, name="vector_scale_good_first"))
    for stem, (_, dps, _) in cases.items():
        folder = next(f for f in folders if (f / f"{stem}.py").exists())
        made.add_solution(solution(stem, dps, folder=folder))
    for size in sizes:
        made.add_workload(
            DEFINITION.name,
            Workload(
                uuid=f"n{size}",
                axes={"n": size},
                inputs={"x": RandomInput(), "factor": ScalarInput(value=1.5)},
            ),
        )
    return made
