"""Issue 42's last bar: a TileLang solution written with FlashInfer-Bench's classes runs in both
tools with the same verdicts.

The dataset is written by flashinfer-bench 0.1.2's own classes and save helpers:
fused_add_rmsnorm_h4096 shaped as the published FlashInfer-Trace definition (bf16, hidden 4096
constant, a var batch axis, epsilon fixed in the reference, one output), four workloads (batches
1, 7, 64 and 1031) and three TileLang solutions written as FlashInfer-Bench's own TileLang test
writes one (a module whose ``@tilelang.jit`` factory builds the kernel on first call, entry point
``main.py::run``): a value-returning one (``out_idx=[-1]``, the kernel allocates the output), a
destination-passing one, and a value-returning one that forgets the residual add.

Without a GPU: kernelarena validates the folder and plans its jobs, kernelarena's and
FlashInfer-Bench's TileLang builders both build the solutions unchanged, and TileLang lowers each
one's kernel to CUDA for sm_90a (nvcc, nothing launched). The library's TileLang solution, written
by ``kernelarena export``, loads in FlashInfer-Bench and its builder builds it.

On the GPU (marked ``gpu``): ``flashinfer-bench run`` and ``kernelarena run``, each from its
command line on its own copy of the folder, give the same verdict per (solution, workload), read
from the traces each wrote: PASSED for both correct solutions, INCORRECT_NUMERICAL for the wrong
one. And ``flashinfer-bench run`` passes the exported library solution on its smaller workloads.
"""

from __future__ import annotations

import json
import os
import shlex
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from kernelarena.cli import app
from kernelarena.compile import DependencyMissing, build_solution
from kernelarena.compile import tilelang as tilelang_builder
from kernelarena.data import Language, TraceSet
from kernelarena.evaluate.executors.runner import make_plan

fib = pytest.importorskip(
    "flashinfer_bench.data",
    reason="flashinfer-bench 0.1.2 is not importable (pip install flashinfer-bench==0.1.2)",
)

DEFINITION_NAME = "fused_add_rmsnorm_h4096"
OP_TYPE = "rmsnorm"  # the published fused_add_rmsnorm_h* definitions are filed under rmsnorm
HIDDEN = 4096
BATCHES = (1, 7, 64, 1031)  # odd counts too: one block a row, so any batch goes
AUTHOR = "kernelarena-fib-tilelang"
# FlashInfer-Bench's console script (benchmarks/bench_vs_flashinfer_bench.py runs it the same way):
# through this interpreter, so both tools import the same packages.
PEER_ENTRY = "import sys; from flashinfer_bench.cli.main import cli; sys.exit(cli())"

REFERENCE = """import torch


@torch.no_grad()
def run(hidden_states, residual, weight):
    _, hidden_size = hidden_states.shape
    assert hidden_size == 4096
    EPS = 1e-6
    x = hidden_states.to(torch.float32) + residual.to(torch.float32)
    inv_rms = torch.rsqrt(x.pow(2).mean(dim=-1, keepdim=True) + EPS)
    return (x * inv_rms * weight.to(torch.float32)).to(hidden_states.dtype)
"""

# One block a row: 256 threads hold the 4096 float32 sums of a row in registers (16 each, read as
# two 16-byte bf16 loads), a block all-reduce sums their squares. The batch is a dynamic axis, so
# one compile serves every workload. {out_idx}: [-1] makes the kernel allocate and return the
# output (value-returning), None takes it as an argument; {row_value} is what gets normalized.
KERNEL_SOURCE = """import tilelang
import tilelang.language as T

EPS = 1e-6
THREADS = 256


@tilelang.jit(out_idx={out_idx})
def fused_add_rmsnorm(hidden_size, dtype):
    batch_size = T.dynamic("batch_size")

    @T.prim_func
    def kernel(
        hidden_states: T.Tensor((batch_size, hidden_size), dtype),
        residual: T.Tensor((batch_size, hidden_size), dtype),
        weight: T.Tensor((hidden_size,), dtype),
        output: T.Tensor((batch_size, hidden_size), dtype),
    ):
        with T.Kernel(batch_size, threads=THREADS) as row:
            summed = T.alloc_fragment((hidden_size,), "float32")
            squares = T.alloc_fragment((hidden_size,), "float32")
            total = T.alloc_fragment((1,), "float32")
            for i in T.Parallel(hidden_size):
                summed[i] = {row_value}
            for i in T.Parallel(hidden_size):
                squares[i] = summed[i] * summed[i]
            T.reduce_sum(squares, total, dim=0)
            for i in T.Parallel(hidden_size):
                inv_rms = T.rsqrt(total[0] / hidden_size + EPS)
                output[row, i] = T.cast(summed[i] * inv_rms * T.cast(weight[i], "float32"), dtype)

    return kernel
"""
ADDED = 'T.cast(hidden_states[row, i], "float32") + T.cast(residual[row, i], "float32")'
RESIDUAL_FORGOTTEN = 'T.cast(hidden_states[row, i], "float32")'

VALUE_RETURNING_RUN = """

def run(hidden_states, residual, weight):
    kernel = fused_add_rmsnorm(hidden_states.shape[1], "bfloat16")
    return kernel(hidden_states, residual, weight)
"""
DESTINATION_PASSING_RUN = """

def run(hidden_states, residual, weight, output):
    kernel = fused_add_rmsnorm(hidden_states.shape[1], "bfloat16")
    kernel(hidden_states, residual, weight, output)
"""

# name suffix -> (destination-passing, source, description, the verdict both tools must give)
SOLUTIONS = {
    "tilelang": (
        False,
        KERNEL_SOURCE.format(out_idx="[-1]", row_value=ADDED) + VALUE_RETURNING_RUN,
        "TileLang, value-returning: the kernel allocates the output",
        "PASSED",
    ),
    "tilelang_dps": (
        True,
        KERNEL_SOURCE.format(out_idx="None", row_value=ADDED) + DESTINATION_PASSING_RUN,
        "TileLang, destination-passing",
        "PASSED",
    ),
    "tilelang_no_residual": (
        False,
        KERNEL_SOURCE.format(out_idx="[-1]", row_value=RESIDUAL_FORGOTTEN) + VALUE_RETURNING_RUN,
        "TileLang, wrong on purpose: normalizes hidden_states without adding the residual",
        "INCORRECT_NUMERICAL",
    ),
}


def _solution_name(suffix: str) -> str:
    return f"{DEFINITION_NAME}_{suffix}"


EXPECTED = {
    (_solution_name(suffix), f"{DEFINITION_NAME}_b{batch}"): verdict
    for suffix, (_, _, _, verdict) in SOLUTIONS.items()
    for batch in BATCHES
}


# -- the dataset, in flashinfer-bench's own classes ------------------------------------------


def _their_definition() -> Any:
    return fib.Definition(
        name=DEFINITION_NAME,
        op_type=OP_TYPE,
        description=f"Fused residual add and RMSNorm, hidden_size={HIDDEN}, epsilon 1e-6.",
        tags=["status:verified"],
        axes={"batch_size": fib.AxisVar(), "hidden_size": fib.AxisConst(value=HIDDEN)},
        inputs={
            "hidden_states": fib.TensorSpec(shape=["batch_size", "hidden_size"], dtype="bfloat16"),
            "residual": fib.TensorSpec(shape=["batch_size", "hidden_size"], dtype="bfloat16"),
            "weight": fib.TensorSpec(shape=["hidden_size"], dtype="bfloat16"),
        },
        outputs={"output": fib.TensorSpec(shape=["batch_size", "hidden_size"], dtype="bfloat16")},
        reference=REFERENCE,
    )


def _their_solutions() -> list[Any]:
    solutions = []
    for suffix, (destination_passing, source, description, _) in SOLUTIONS.items():
        spec = fib.BuildSpec(
            language=fib.SupportedLanguages.TILELANG,
            target_hardware=["cuda"],
            entry_point="main.py::run",
            dependencies=["tilelang", "torch"],
            destination_passing_style=destination_passing,
        )
        solutions.append(
            fib.Solution(
                name=_solution_name(suffix),
                definition=DEFINITION_NAME,
                author=AUTHOR,
                spec=spec,
                sources=[fib.SourceFile(path="main.py", content=source)],
                description=description,
            )
        )
    return solutions


def _their_dataset(root: Path) -> Any:
    """Definition and solutions through save_json_file, workloads through the TraceSet's own
    add_workload_traces; returns the set as TraceSet.from_path reads it back."""
    fib.save_json_file(
        _their_definition(), root / "definitions" / OP_TYPE / f"{DEFINITION_NAME}.json"
    )
    for solution in _their_solutions():
        fib.save_json_file(
            solution, root / "solutions" / OP_TYPE / DEFINITION_NAME / f"{solution.name}.json"
        )
    written = fib.TraceSet.from_path(str(root))
    inputs = {name: fib.RandomInput() for name in ("hidden_states", "residual", "weight")}
    written.add_workload_traces(
        [
            fib.Trace(
                definition=DEFINITION_NAME,
                workload=fib.Workload(
                    uuid=f"{DEFINITION_NAME}_b{batch}", axes={"batch_size": batch}, inputs=inputs
                ),
            )
            for batch in BATCHES
        ]
    )
    return fib.TraceSet.from_path(str(root))


def _tilelang_or_skip() -> None:
    try:
        tilelang_builder.tilelang_version()
    except DependencyMissing as error:
        pytest.skip(str(error))


# -- without a GPU ---------------------------------------------------------------------------


def test_kernelarena_validates_and_plans_what_flashinfer_bench_wrote(tmp_path: Path) -> None:
    theirs = _their_dataset(tmp_path / "theirs")
    assert {s.name for s in theirs.solutions[DEFINITION_NAME]} == {n for n, _ in EXPECTED}

    result = CliRunner().invoke(app, ["validate", str(tmp_path / "theirs")])
    assert result.exit_code == 0, result.output
    assert "1 definitions, 3 solutions, 4 workloads, 0 traces; 0 problem(s)" in result.output

    ours = TraceSet.load(tmp_path / "theirs", strict=True)
    for suffix, (destination_passing, source, _, _) in SOLUTIONS.items():
        solution = ours.solutions[_solution_name(suffix)]
        assert solution.spec.language is Language.TILELANG
        assert solution.spec.destination_passing_style is destination_passing
        assert solution.sources[0].content == source
    on_gpu = make_plan(ours, [DEFINITION_NAME], suite="all", on_gpu=True)
    assert {(job.solution.name, job.workload.uuid) for job in on_gpu.jobs} == set(EXPECTED)
    assert on_gpu.skipped == [] and on_gpu.rejected == []
    # Their target is "cuda": without a GPU kernelarena leaves them out, saying why.
    on_cpu = make_plan(ours, [DEFINITION_NAME], suite="all", on_gpu=False)
    assert on_cpu.jobs == []
    assert [why for _, _, why in on_cpu.skipped] == ["targets cuda; no GPU here"] * 3


@pytest.mark.timeout(900)
def test_both_builders_build_the_solutions_and_tilelang_lowers_them(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _tilelang_or_skip()
    import tilelang
    from flashinfer_bench.compile.builders import TileLangBuilder as TheirTileLangBuilder

    monkeypatch.setenv("FIB_CACHE_PATH", str(tmp_path / "fib-cache"))
    theirs = _their_dataset(tmp_path / "theirs")
    ours = TraceSet.load(tmp_path / "theirs", strict=True)
    definition = ours.definitions[DEFINITION_NAME]
    sm90a = {"kind": "cuda", "arch": "sm_90a"}
    for solution in theirs.solutions[DEFINITION_NAME]:
        their_runnable = TheirTileLangBuilder().build(theirs.definitions[DEFINITION_NAME], solution)
        assert their_runnable.metadata.build_type == "tilelang"
        runnable = build_solution(definition, ours.solutions[solution.name], "cpu")
        assert runnable.metadata["build_type"] == "tilelang"
        assert runnable.destination_passing_style == solution.spec.destination_passing_style
        # The kernel as the solution's own factory makes it, lowered and compiled for sm_90a.
        factory = runnable.fn.__globals__["fused_add_rmsnorm"]
        kernel = tilelang.compile(
            factory.get_tir(HIDDEN, "bfloat16"), out_idx=factory.out_idx, target=sm90a
        )
        source = kernel.get_kernel_source()
        assert "__global__" in source, solution.name
        # 16-byte loads of each row; the wrong solution never reads the residual.
        assert "*(uint4*)(hidden_states +" in source, solution.name
        reads_residual = "*(uint4*)(residual +" in source
        assert reads_residual != solution.name.endswith("_no_residual"), solution.name


def _library_export(root: Path) -> Path:
    """``kernelarena export`` of the built-in library alone (an empty dataset of the user's)."""
    empty = root / "empty"
    empty.mkdir(parents=True)
    exported = root / "exported"
    result = CliRunner().invoke(app, ["export", str(exported), "--dataset", str(empty)])
    assert result.exit_code == 0, result.output
    return exported


LIBRARY_DEFINITION = "fused_add_rmsnorm_bf16"


def _their_library_solution(theirs: Any) -> Any:
    (solution,) = [
        s
        for s in theirs.solutions[LIBRARY_DEFINITION]
        if s.spec.language == fib.SupportedLanguages.TILELANG
    ]
    return solution


@pytest.mark.timeout(600)
def test_library_tilelang_solution_exported_builds_in_flashinfer_bench(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    exported = _library_export(tmp_path)
    theirs = fib.TraceSet.from_path(str(exported))
    solution = _their_library_solution(theirs)
    assert solution.spec.entry_point == "fused_add_rmsnorm.py::run"
    assert solution.spec.destination_passing_style is True
    from flashinfer_bench.compile.builders import TileLangBuilder as TheirTileLangBuilder

    assert TheirTileLangBuilder().can_build(solution)
    _tilelang_or_skip()
    monkeypatch.setenv("FIB_CACHE_PATH", str(tmp_path / "fib-cache"))
    runnable = TheirTileLangBuilder().build(theirs.definitions[LIBRARY_DEFINITION], solution)
    assert runnable.metadata.build_type == "tilelang"
    assert runnable.metadata.destination_passing_style is True


# -- on the GPU --------------------------------------------------------------------------------


def _tool_environment(**extra: str) -> dict[str, str]:
    """This run's environment with PYTHONPATH made absolute, so that both tools import this
    checkout's kernelarena and the same tilelang and flashinfer-bench as the test."""
    paths = [
        str(Path(p).resolve()) for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p
    ]
    return {**os.environ, "PYTHONPATH": os.pathsep.join(paths), **extra}


def _run_tool(command: list[str], environment: dict[str, str]) -> str:
    """Runs one tool's command line to its end; returns the tail of what it printed. 480 s: a
    hung tool is reported within one 10-minute call of the device machine."""
    done = subprocess.run(
        command, env=environment, capture_output=True, text=True, timeout=480, check=False
    )
    printed = f"{shlex.join(command[3:])}\n{done.stdout[-3000:]}\n{done.stderr[-5000:]}"
    assert done.returncode == 0, printed
    return printed


def _run_flashinfer_bench(dataset: Path, caches: Path) -> str:
    """Fewer timed calls than its defaults (50, after 10 warm-up): the verdicts come from its
    correctness trials (3, the default), which run first. TileLang's kernel cache in ``caches``
    too, so that it compiles the kernels itself."""
    command = [sys.executable, "-c", PEER_ENTRY, "run", "--local", str(dataset)]
    command += ["--warmup-runs", "3", "--iterations", "10"]
    environment = _tool_environment(
        FIB_CACHE_PATH=str(caches / "flashinfer_bench"), TILELANG_CACHE_DIR=str(caches / "tilelang")
    )
    return _run_tool(command, environment)


def _run_kernelarena(dataset: Path) -> str:
    """--allow-failures: the wrong solution's failures are expected, and its verdicts are read
    from the traces, as the peer's are."""
    command = [sys.executable, "-m", "kernelarena.cli", "run", DEFINITION_NAME]
    command += ["--dataset", str(dataset), "--device", "cuda", "--suite", "all"]
    command += ["--allow-failures"]
    return _run_tool(command, _tool_environment())


def _verdicts(dataset: Path) -> tuple[dict[tuple[str, str], str], dict[tuple[str, str], str]]:
    """(solution, workload uuid) -> status, and -> the head of the log, from every evaluated trace
    under traces/, read as plain JSON so that either tool's lines read alike."""
    statuses, logs = {}, {}
    for path in sorted((dataset / "traces").rglob("*.jsonl")):
        for line in path.read_text().splitlines():
            trace = json.loads(line) if line.strip() else {}
            if trace.get("solution") and trace.get("evaluation"):
                key = (trace["solution"], trace["workload"]["uuid"])
                statuses[key] = trace["evaluation"]["status"]
                logs[key] = (trace["evaluation"].get("log") or "")[:1500]
    return statuses, logs


def _unexpected(statuses: dict[tuple[str, str], str], logs: dict[tuple[str, str], str]) -> str:
    return "\n".join(
        f"{key}: {status}: {logs[key]}"
        for key, status in statuses.items()
        if status != EXPECTED.get(key)
    )


@pytest.mark.gpu
@pytest.mark.timeout(1200)
def test_both_tools_give_the_same_verdicts_on_the_gpu(tmp_path: Path) -> None:
    _tilelang_or_skip()
    _their_dataset(tmp_path / "written")
    for copy in ("peer", "ours"):
        shutil.copytree(tmp_path / "written", tmp_path / copy)
    peer_printed = _run_flashinfer_bench(tmp_path / "peer", tmp_path / "peer-caches")
    our_printed = _run_kernelarena(tmp_path / "ours")
    peer, peer_logs = _verdicts(tmp_path / "peer")
    ours, our_logs = _verdicts(tmp_path / "ours")
    # Per (solution, workload): (flashinfer-bench's verdict, kernelarena's), a job either tool
    # left without a trace as None.
    both = {
        key: (peer.get(key), ours.get(key)) for key in EXPECTED.keys() | peer.keys() | ours.keys()
    }
    assert both == {key: (verdict, verdict) for key, verdict in EXPECTED.items()}, (
        _unexpected(peer, peer_logs) or peer_printed,
        _unexpected(ours, our_logs) or our_printed,
    )


def _smaller_workloads_of(exported: Path, solution: Any, root: Path) -> set[str]:
    """The exported definition and its TileLang solution with the workloads of 1 to 64 rows, saved
    again with FlashInfer-Bench's helpers into ``root``; returns their uuids. Its run then covers
    the solution's odd widths (1, 1001, 4097, 40000) without the million-row workload."""
    theirs = fib.TraceSet.from_path(str(exported))
    definition = theirs.definitions[LIBRARY_DEFINITION]
    folder = Path(definition.op_type)
    fib.save_json_file(definition, root / "definitions" / folder / f"{definition.name}.json")
    fib.save_json_file(
        solution, root / "solutions" / folder / definition.name / f"{solution.name}.json"
    )
    small = [t for t in theirs.workloads[LIBRARY_DEFINITION] if 0 < t.workload.axes["rows"] <= 64]
    fib.save_jsonl_file(small, root / "workloads" / folder / f"{definition.name}.jsonl")
    return {t.workload.uuid for t in small}


@pytest.mark.gpu
@pytest.mark.timeout(1200)
def test_library_tilelang_solution_passes_in_flashinfer_bench_on_the_gpu(tmp_path: Path) -> None:
    _tilelang_or_skip()
    exported = _library_export(tmp_path)
    solution = _their_library_solution(fib.TraceSet.from_path(str(exported)))
    uuids = _smaller_workloads_of(exported, solution, tmp_path / "peer")
    printed = _run_flashinfer_bench(tmp_path / "peer", tmp_path / "peer-caches")
    statuses, logs = _verdicts(tmp_path / "peer")
    assert statuses == {(solution.name, uuid): "PASSED" for uuid in uuids}, (logs, printed)
