"""A tolerance loose enough for every honest kernel still fails two kinds of wrong ones: a kernel
right only on the distribution the inputs usually come from (a copy for a normalization of rows
already normal), caught by the trials' other distributions; and one that computes in a lower
precision than the definition's dtype, caught by its error against the reference computed in
float64, measured against the reference's own (``evaluate.sandbox.error_ratio``)."""

from __future__ import annotations

from pathlib import Path

import pytest

from kernelarena.data import (
    AxisConst,
    AxisVar,
    BuildSpec,
    Definition,
    RandomInput,
    Solution,
    SourceFile,
    Status,
    TensorSpec,
    Tolerance,
    TraceSet,
    Workload,
)
from kernelarena.evaluate.executors.benchmark import Benchmark
from kernelarena.evaluate.executors.jobs import Timeouts
from kernelarena.evaluate.options import Options

# Rows normalised to zero mean and unit variance, with a tolerance loose enough that leaving rows
# of the standard normal as they are passes it, the error against the float64 reference included
# (which alone would catch the copy: this isolates the check by distributions).
NORMALIZE = Definition(
    name="normalize_rows",
    op_type="test",
    axes={"rows": AxisVar(), "hidden": AxisConst(value=65536)},
    inputs={"x": TensorSpec(shape=["rows", "hidden"], dtype="float32")},
    outputs={"out": TensorSpec(shape=["rows", "hidden"], dtype="float32")},
    reference=(
        "import torch\n\n\ndef run(x):\n"
        "    mean = x.mean(-1, keepdim=True)\n"
        "    return (x - mean) / torch.sqrt(x.var(-1, unbiased=False, keepdim=True) + 1e-12)\n"
    ),
    tolerances={"out": Tolerance(atol=0.05, rtol=0.05, max_error_ratio=1e9)},
)
# A float32 dot product of rows, with a tolerance a bfloat16 product also meets.
ROW_DOT = Definition(
    name="row_dot",
    op_type="test",
    axes={"rows": AxisVar(), "hidden": AxisConst(value=4096)},
    inputs={
        "a": TensorSpec(shape=["rows", "hidden"], dtype="float32"),
        "b": TensorSpec(shape=["rows", "hidden"], dtype="float32"),
    },
    outputs={"out": TensorSpec(shape=["rows"], dtype="float32")},
    reference="import torch\n\n\ndef run(a, b):\n    return (a * b).sum(-1)\n",
    tolerances={"out": Tolerance(atol=0.5, rtol=0.05)},
)
SOLUTIONS = {
    "normalize_rows": {
        "honest": (
            "import torch\n\n\ndef run(x, out):\n"
            "    centred = x - x.mean(-1, keepdim=True)\n"
            "    out.copy_(centred * torch.rsqrt(centred.square().mean(-1, keepdim=True) + 1e-12))\n"
        ),
        "copies": "def run(x, out):\n    out.copy_(x)\n",
    },
    "row_dot": {
        "honest": "def run(a, b, out):\n    out.copy_((a * b).sum(-1))\n",
        "in_bfloat16": (
            "import torch\n\n\ndef run(a, b, out):\n"
            "    out.copy_((a.bfloat16() * b.bfloat16()).sum(-1, dtype=torch.bfloat16).float())\n"
        ),
    },
}


def _dataset(
    root: Path, solutions: list[tuple[Definition, dict[str, str]]], rows: int = 4
) -> TraceSet:
    """Each definition with one workload of ``rows`` rows and its Python solutions by name stem."""
    dataset = TraceSet(root=root)
    for definition, sources in solutions:
        dataset.add_definition(definition)
        dataset.add_workload(
            definition.name,
            Workload(
                uuid=f"r{rows}",
                axes={"rows": rows},
                inputs={n: RandomInput() for n in definition.inputs},
            ),
        )
        for stem, source in sources.items():
            dataset.add_solution(
                Solution(
                    name=f"{definition.name}_{stem}",
                    definition=definition.name,
                    author="tests",
                    spec=BuildSpec(
                        language="python", target_hardware=["cpu", "cuda"], entry_point="s.py::run"
                    ),
                    sources=[SourceFile(path="s.py", content=source)],
                )
            )
    return dataset


@pytest.mark.timeout(600)
def test_a_copy_and_a_lower_precision_kernel_fail_where_honest_ones_pass(tmp_path: Path) -> None:
    benchmark = Benchmark(
        _dataset(tmp_path, [(d, SOLUTIONS[d.name]) for d in (NORMALIZE, ROW_DOT)]),
        devices="cpu",
        options=Options(trials=3, budget_ms=20, max_iterations=20),
        timeouts=Timeouts(build_s=120, run_s=60, startup_s=300),
    )
    found = {t.solution: t.evaluation for t in benchmark.run_all()}
    for name in ("normalize_rows_honest", "row_dot_honest"):
        evaluation = found[name]
        assert evaluation is not None and evaluation.status is Status.PASSED, evaluation
        assert evaluation.correctness is not None
        ratio = evaluation.correctness.error_ratio
        assert ratio is not None and ratio < 16, ratio
    copies = found["normalize_rows_copies"]
    assert copies is not None and copies.status is Status.INCORRECT_NUMERICAL
    assert "trial 2 of 3 (inputs drawn as 0.125 * N(0, 1) + 0)" in copies.log, copies.log
    lower = found["row_dot_in_bfloat16"]
    assert lower is not None and lower.status is Status.INCORRECT_NUMERICAL, lower
    assert "the solution computes in a lower precision" in lower.log, lower.log


# A float16 row sum whose reference adds the columns one at a time in float16: every addition
# rounds, so the reference itself sits far from the exact sum (0.07 at 256 columns), further than
# the float16 tolerance (1e-3 + 1e-3 * |ref|) from a solution that sums in float32.
SEQUENTIAL_SUM = Definition(
    name="row_sum_fp16",
    op_type="test",
    axes={"rows": AxisVar(), "hidden": AxisConst(value=256)},
    inputs={"x": TensorSpec(shape=["rows", "hidden"], dtype="float16")},
    outputs={"out": TensorSpec(shape=["rows"], dtype="float16")},
    reference=(
        "def run(x):\n"
        "    total = x[:, 0].clone()\n"
        "    for column in range(1, x.shape[1]):\n"
        "        total = total + x[:, column]\n"
        "    return total\n"
    ),
)
SUMS = {
    "accurate": "def run(x, out):\n    out.copy_(x.float().sum(-1))\n",
    "drops_a_column": "def run(x, out):\n    out.copy_(x[:, 1:].float().sum(-1))\n",
}


@pytest.mark.timeout(600)
def test_a_solution_more_accurate_than_the_reference_passes(tmp_path: Path) -> None:
    """It misses the reference in the definition's dtype but matches the reference computed in
    float64 within the same tolerance: PASSED. One that is wrong misses both and still fails."""
    dataset = _dataset(tmp_path, [(SEQUENTIAL_SUM, SUMS)], rows=5)
    benchmark = Benchmark(
        dataset,
        devices="cpu",
        options=Options(trials=3, budget_ms=20, max_iterations=20),
        timeouts=Timeouts(build_s=120, run_s=60, startup_s=300),
    )
    found = {t.solution: t.evaluation for t in benchmark.run_all()}
    accurate = found["row_sum_fp16_accurate"]
    assert accurate is not None and accurate.status is Status.PASSED, accurate
    wrong = found["row_sum_fp16_drops_a_column"]
    assert wrong is not None and wrong.status is Status.INCORRECT_NUMERICAL, wrong


def test_inputs_too_large_for_the_float64_run_are_never_copied(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The float64 run is skipped above ``PRECISE_BYTES_LIMIT`` of upcast inputs, counted before
    any copy is made: a copy made first (a 16 GiB float64 KV cache) ran the reference's sandbox
    out of memory, and the job was skipped instead of judged without the ratio."""
    import torch

    from kernelarena.evaluate.sandbox import error_ratio

    class Tripwire(torch.Tensor):
        def to(self, *args: object, **kwargs: object) -> torch.Tensor:  # type: ignore[override]
            raise AssertionError("an input was upcast although the run is skipped")

    definition = NORMALIZE
    x = torch.randn(4, 8).as_subclass(Tripwire)
    monkeypatch.setattr(error_ratio, "PRECISE_BYTES_LIMIT", 8 * 32 - 1)
    assert error_ratio.precise_inputs(definition, {"x": x}) is None
    monkeypatch.setattr(error_ratio, "PRECISE_BYTES_LIMIT", 8 * 32)
    upcast = error_ratio.precise_inputs(definition, {"x": torch.randn(4, 8)})
    assert upcast is not None and upcast["x"].dtype == torch.float64
