"""Evaluation cost against FlashInfer-Bench 0.1.2, both driven from their command lines.

One FlashInfer-Trace dataset, written with flashinfer-bench's own classes and save helpers: the
definition rmsnorm_h4096 (bf16, hidden 4096, a variable batch axis, epsilon 1e-6, shaped as the
published rmsnorm definitions are), 8 workloads (batch 1 to 8192, random inputs) and 3 solutions
(a Triton kernel, plain PyTorch, torch.nn.functional.rms_norm). Both tools evaluate the same
3 x 8 jobs on the same folder, each timed as a whole command (wall clock, start-up included):

    flashinfer-bench run --local DATASET --definitions rmsnorm_h4096
    kernelarena run rmsnorm_h4096 --dataset DATASET --device cuda --suite all --json --allow-failures

in this order per repetition: peer cold, ours first, ours cold, peer warm, ours warm. Cold: empty
Triton, Inductor and tool caches (FIB_CACHE_PATH, KERNELARENA_CACHE); warm: the same caches again.
Where the machine keeps no Python bytecode (the lent GPU machines' image), kernelarena keeps its
processes' bytecode in a folder of its own (KERNELARENA_BYTECODE_CACHE): "first" is a cold run that
finds that folder empty too, as on a machine kernelarena never ran on; cold and warm find what the
first run wrote there (as a pip install's .pyc files would be found). The traces folder is cleared
before every run, so every run evaluates all 24 jobs, and each run starts once no process of the
previous run holds a GPU device file (untimed, reported as teardown_s). The bar: ours at most half
the peer's time, cold and warm; "first" is reported beside the peer's cold run, without a bar.
Also reported: the traces each tool wrote and their statuses, and both tools' latencies per
solution and batch. They time differently: FlashInfer-Bench
takes the mean of 50 calls, each timed with CUDA events after an L2 flush, launch included;
kernelarena the median, as CUDA graph replays (launch gaps not counted) for calls under 100 us, and
it also records the eager per-call time (eager_call_ms), the figure closer to the peer's there.
Each of kernelarena's runs prints where its jobs' time went, as the engine records it (the stage
table of ``evaluate/executors/job_stages.py``, kept under ``stages`` in the JSON).

Both tools run on the GPUs of --gpus (CUDA_VISIBLE_DEVICES): FlashInfer-Bench takes every visible
GPU and has no device option. Without a GPU only kernelarena runs (FlashInfer-Bench's runner needs
CUDA), at batches 1-8 under the Triton interpreter. --dry-run builds and checks the dataset (both
loaders, ``kernelarena validate`` and ``list``, the planned jobs) and prints the commands.
Results: benchmarks/results/vs_flashinfer_bench_<device>_<date>.json.
"""

from __future__ import annotations

import argparse
import importlib.metadata
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks.bench_engine import python_bytecode
from benchmarks.harness import environment, kernelarena_git_rev, sandbox_walls, write_report
from kernelarena.evaluate.executors.job_stages import NEW_SANDBOX, by_phase, stage_table
from kernelarena.evaluate.judge.worker import describe_startup

try:
    from flashinfer_bench.data import (
        AxisConst,
        AxisVar,
        BuildSpec,
        Definition,
        RandomInput,
        Solution,
        SourceFile,
        TensorSpec,
        Trace,
        TraceSet,
        Workload,
        save_json_file,
    )
except ImportError as missing:  # the device installs the wheel with --no-deps: name what is absent
    raise SystemExit(
        f"flashinfer-bench 0.1.2 cannot be imported ({missing}); it needs pydantic, safetensors, "
        "docstring-parser and filelock at import time"
    ) from missing

REPO = Path(__file__).resolve().parent.parent
DEFINITION_NAME = "rmsnorm_h4096"
OP_TYPE = "rmsnorm"
HIDDEN = 4096
AUTHOR = "kernelarena-bench"
BATCHES = (1, 8, 32, 128, 512, 1024, 4096, 8192)
# The Triton interpreter on a CPU gets through small batches only: the same job count, smaller.
CPU_BATCHES = (1, 2, 3, 4, 5, 6, 7, 8)
BAR = 0.5  # ours / peer wall time, cold and warm
LOG_HEAD_LINES = 15

# FlashInfer-Bench's console script runs exactly this; calling it through this interpreter keeps
# both tools on the same Python wherever the wheel's scripts folder is (pip --target leaves it off
# PATH). flashinfer_bench.cli has no __main__, so `python -m` is not an option.
PEER_ENTRY = "import sys; from flashinfer_bench.cli.main import cli; sys.exit(cli())"
# Run once, untimed, before the first timed run: the first process to import torch on a fresh
# machine reads its libraries from disk and starts the driver, a cost the first run (the peer's)
# would otherwise pay alone.
PRIME_PAGE_CACHE = (
    "import torch, triton, flashinfer_bench.cli.main, kernelarena.cli\n"
    "if torch.cuda.is_available(): torch.zeros(1, device='cuda')"
)

REFERENCE = """import torch


@torch.no_grad()
def run(hidden_states, weight):
    batch_size, hidden_size = hidden_states.shape
    assert hidden_size == 4096  # the definition's constant axis
    eps = 1e-6
    x = hidden_states.to(torch.float32)
    inv_rms = torch.rsqrt(x.square().mean(dim=-1, keepdim=True) + eps)
    return (x * inv_rms * weight.to(torch.float32)).to(hidden_states.dtype)
"""

TRITON_SOURCE = """import triton
import triton.language as tl

EPS = 1e-6


@triton.jit
def _rmsnorm_row(x_ptr, weight_ptr, out_ptr, x_row_stride, out_row_stride, hidden, eps,
                 BLOCK: tl.constexpr):
    # One program per row: a 4096-wide bf16 row fits in registers, so x is read from memory once.
    row = tl.program_id(0).to(tl.int64)
    cols = tl.arange(0, BLOCK)
    in_row = cols < hidden
    x = tl.load(x_ptr + row * x_row_stride + cols, mask=in_row, other=0.0).to(tl.float32)
    inv_rms = tl.rsqrt(tl.sum(x * x, axis=0) / hidden + eps)
    w = tl.load(weight_ptr + cols, mask=in_row, other=0.0).to(tl.float32)
    y = x * inv_rms * w
    tl.store(out_ptr + row * out_row_stride + cols, y.to(out_ptr.dtype.element_ty), mask=in_row)


def run(hidden_states, weight, output):
    rows, hidden = hidden_states.shape
    if rows == 0:
        return
    _rmsnorm_row[(rows,)](
        hidden_states, weight, output, hidden_states.stride(0), output.stride(0), hidden, EPS,
        BLOCK=triton.next_power_of_2(hidden), num_warps=8,
    )
"""

TORCH_SOURCE = """import torch

EPS = 1e-6


def run(hidden_states, weight, output):
    x = hidden_states.to(torch.float32)
    inv_rms = torch.rsqrt(x.square().mean(dim=-1, keepdim=True) + EPS)
    output.copy_(x * inv_rms * weight.to(torch.float32))
"""

FUNCTIONAL_SOURCE = """import torch.nn.functional as F

EPS = 1e-6


def run(hidden_states, weight, output):
    output.copy_(F.rms_norm(hidden_states, (hidden_states.shape[-1],), weight, eps=EPS))
"""

# name suffix -> (language as FlashInfer-Trace spells it, source, description)
SOLUTIONS = {
    "triton_row": ("triton", TRITON_SOURCE, "Triton, one row per program, float32 math"),
    "torch_eager": ("python", TORCH_SOURCE, "plain PyTorch ops, float32 math"),
    "torch_functional": ("python", FUNCTIONAL_SOURCE, "torch.nn.functional.rms_norm"),
}


# -- the dataset, in flashinfer-bench's own classes ------------------------------------------


def peer_definition() -> Definition:
    """Shaped as FlashInfer-Trace's published rmsnorm_h* definitions: epsilon fixed in the
    reference, no eps input, a var batch axis and a const hidden axis."""
    return Definition(
        name=DEFINITION_NAME,
        op_type=OP_TYPE,
        description=f"Root mean square normalization, hidden_size={HIDDEN}, epsilon fixed at 1e-6.",
        tags=["status:verified", "model:llama-3.1-8b"],
        axes={
            "batch_size": AxisVar(type="var"),
            "hidden_size": AxisConst(type="const", value=HIDDEN),
        },
        inputs={
            "hidden_states": TensorSpec(shape=["batch_size", "hidden_size"], dtype="bfloat16"),
            "weight": TensorSpec(shape=["hidden_size"], dtype="bfloat16"),
        },
        outputs={"output": TensorSpec(shape=["batch_size", "hidden_size"], dtype="bfloat16")},
        reference=REFERENCE,
    )


def peer_solutions() -> list[Solution]:
    solutions = []
    for suffix, (language, source, description) in SOLUTIONS.items():
        spec = BuildSpec(
            language=language,
            # FlashInfer-Bench ignores the targets; kernelarena runs 'cpu' ones on a CPU, Triton
            # under its interpreter.
            target_hardware=["cuda", "cpu"],
            entry_point="main.py::run",
            destination_passing_style=True,  # set explicitly so that the saved file names it
        )
        solutions.append(
            Solution(
                name=f"{DEFINITION_NAME}_{suffix}",
                definition=DEFINITION_NAME,
                author=AUTHOR,
                spec=spec,
                sources=[SourceFile(path="main.py", content=source)],
                description=description,
            )
        )
    return solutions


def build_dataset(root: Path, batches: tuple[int, ...]) -> TraceSet:
    """Definition and solutions through save_json_file, workloads through TraceSet's own
    add_workload_traces (workloads/<op_type>/<definition>.jsonl); returns the set as
    TraceSet.from_path reads it back."""
    if root.exists():
        shutil.rmtree(root)
    save_json_file(peer_definition(), root / "definitions" / OP_TYPE / f"{DEFINITION_NAME}.json")
    for solution in peer_solutions():
        save_json_file(
            solution, root / "solutions" / OP_TYPE / DEFINITION_NAME / f"{solution.name}.json"
        )
    trace_set = TraceSet.from_path(str(root))
    inputs = {"hidden_states": RandomInput(type="random"), "weight": RandomInput(type="random")}
    trace_set.add_workload_traces(
        [
            Trace(
                definition=DEFINITION_NAME,
                workload=Workload(
                    axes={"batch_size": batch}, inputs=inputs, uuid=f"{DEFINITION_NAME}_b{batch}"
                ),
            )
            for batch in batches
        ]
    )
    return TraceSet.from_path(str(root))


# -- the commands ----------------------------------------------------------------------------


def peer_command(dataset: Path) -> list[str]:
    """FlashInfer-Bench's defaults otherwise: 3 trials, 10 warm-up and 50 timed calls, atol and
    rtol 1e-2, its persistent worker per GPU, traces saved into the dataset."""
    return [
        sys.executable,
        "-c",
        PEER_ENTRY,
        "run",
        "--local",
        str(dataset),
        "--definitions",
        DEFINITION_NAME,
    ]


def ours_command(dataset: Path, device: str) -> list[str]:
    """--suite all: every workload on any device (untagged workloads are in every suite anyway);
    --allow-failures: statuses are read from the traces, as for the peer, whose exit status does
    not reflect them."""
    return [
        sys.executable,
        "-m",
        "kernelarena.cli",
        "run",
        DEFINITION_NAME,
        "--dataset",
        str(dataset),
        "--device",
        device,
        "--suite",
        "all",
        "--json",
        "--allow-failures",
    ]


def base_environment(gpus: str | None) -> dict[str, str]:
    env = dict(os.environ)
    if gpus is not None:
        env["CUDA_VISIBLE_DEVICES"] = gpus
    return env


def tool_environment(
    tool: str, caches: Path, gpus: str | None, bytecode: Path | None = None
) -> dict[str, str]:
    """Every cache a run fills lives under ``caches``: a new folder is a cold run, the same one
    again a warm run. ``bytecode``: where kernelarena keeps the bytecode of its processes on a
    machine that keeps none (``kernelarena.evaluate.sandbox.bytecode``); its "first" run starts with it
    empty, its cold and warm runs find what the first one wrote."""
    env = base_environment(gpus)
    env["TRITON_CACHE_DIR"] = str(caches / "triton")
    env["TORCHINDUCTOR_CACHE_DIR"] = str(caches / "inductor")
    if tool == "peer":
        env["FIB_CACHE_PATH"] = str(caches / "flashinfer_bench")  # builds and per-run logs
    else:
        env["KERNELARENA_CACHE"] = str(caches / "kernelarena")
        if bytecode is not None:
            env["KERNELARENA_BYTECODE_CACHE"] = str(bytecode)
    return env


def shown(command: list[str]) -> str:
    """The command as a user types it (the console scripts run the same code)."""
    if command[1:3] == ["-c", PEER_ENTRY]:
        return " ".join(["flashinfer-bench", *command[3:]])
    if command[1:3] == ["-m", "kernelarena.cli"]:
        return " ".join(["kernelarena", *command[3:]])
    return " ".join(command)


# -- one timed run and what it wrote ---------------------------------------------------------


def read_traces(dataset: Path) -> list[dict[str, Any]]:
    """Every evaluated trace under traces/, read as plain JSON so that either tool's lines (ours
    carry fields the peer does not know) are counted alike."""
    traces = []
    for path in sorted((dataset / "traces").rglob("*.jsonl")):
        for line in path.read_text().splitlines():
            if line.strip():
                trace = json.loads(line)
                if trace.get("solution") and trace.get("evaluation"):
                    traces.append(trace)
    return traces


def describe_traces(traces: list[dict[str, Any]]) -> dict[str, Any]:
    statuses: dict[str, int] = {}
    failures = []
    timings: dict[str, dict[str, dict[str, Any]]] = {}
    for trace in traces:
        evaluation = trace["evaluation"]
        status = evaluation["status"]
        statuses[status] = statuses.get(status, 0) + 1
        batch = str(trace["workload"]["axes"].get("batch_size"))
        if status != "PASSED":
            log_head = "\n".join((evaluation.get("log") or "").splitlines()[:LOG_HEAD_LINES])
            failures.append(
                {"solution": trace["solution"], "batch": batch, "status": status, "log": log_head}
            )
        performance = evaluation.get("performance") or {}
        # eager_call_ms and timing_mode are kernelarena's; the peer's traces lack them.
        timing = {
            key: performance[key]
            for key in ("latency_ms", "eager_call_ms", "timing_mode")
            if performance.get(key) is not None
        }
        if timing:
            timings.setdefault(trace["solution"], {})[batch] = timing
    return {
        "trace_count": len(traces),
        "statuses": statuses,
        "failures": failures,
        "timings": timings,
    }


@dataclass(frozen=True)
class Setup:
    """What every run shares: the tools in their order, their commands, the folders, the GPUs."""

    tools: list[str]
    commands: dict[str, list[str]]
    dataset: Path
    work: Path  # the caches of each repetition live here
    gpus: str | None
    expected: int  # traces a complete run writes
    run_timeout_s: float
    gpu_holders_before: set[int]  # processes holding a GPU before any run (this one excepted)


def peer_loader_verdict(dataset: Path) -> bool | str:
    """Whether flashinfer-bench's TraceSet.from_path reads the dataset with the run's traces."""
    try:
        TraceSet.from_path(str(dataset))
    except Exception as error:  # any failure to load is the answer, not the end of the benchmark
        return f"{type(error).__name__}: {error}"[:300]
    return True


def timed_run(setup: Setup, tool: str, label: str, repeat: int, caches: Path) -> dict[str, Any]:
    shutil.rmtree(setup.dataset / "traces", ignore_errors=True)  # every job is evaluated again
    bytecode = setup.work / f"bytecode-{repeat}"
    env = tool_environment(tool, caches, setup.gpus, bytecode if tool == "ours" else None)
    started_at = time.time()  # the clock of the jobs' ``finished_at``
    started = time.perf_counter()
    try:
        finished = subprocess.run(
            setup.commands[tool],
            capture_output=True,
            text=True,
            env=env,
            check=False,
            timeout=setup.run_timeout_s,
        )
        returncode, stdout, stderr = finished.returncode, finished.stdout, finished.stderr
    except subprocess.TimeoutExpired as expired:
        returncode, stdout, stderr = -1, "", f"timed out after {expired.timeout} s"
    wall = time.perf_counter() - started
    record: dict[str, Any] = {"tool": tool, "label": label, "repeat": repeat, "wall_s": wall}
    # Untimed: the next run starts on an idle GPU, not beside this run's processes still
    # releasing theirs (kernelarena's worker leaves its CUDA teardown after its command exits).
    record["teardown_s"] = wait_for_gpu_processes(setup.gpu_holders_before)
    record["returncode"] = returncode
    record.update(describe_traces(read_traces(setup.dataset)))
    record["peer_loader_reads_traces"] = peer_loader_verdict(setup.dataset)
    incomplete = record["trace_count"] != setup.expected  # the peer exits 0 even then
    if returncode != 0 or record["failures"] or incomplete:
        record["stderr_tail"] = stderr[-3000:]
    if tool == "ours" and returncode == 0 and stdout.strip():
        payload = json.loads(stdout.strip().splitlines()[-1])
        # Worker start-up split (import torch, CUDA context): where a warm run's time goes.
        record["skipped"] = payload.get("skipped", [])
        record["worker_startup"] = [e.get("startup") for e in payload.get("environments", [])]
        record["stages"] = payload.get("stages", {})  # where each job's time went, by device
        record["job_stages"] = payload.get("job_stages", [])
        record["started_at"] = started_at
    return record


def first_jobs(record: dict[str, Any]) -> list[str]:
    """Ours: each solution's first job, when it finished (seconds after the command began) and
    its judge's phases (ms), with what a new sandbox's wait was made of (``clocked_sandboxes``):
    the jobs that wait for the run's sandboxes and compilers; first, when each worker was
    spawned and ready (where the command's own start-up ends and the judge's does)."""
    lines, seen = [], set()
    for startup in record.get("worker_startup") or []:
        if startup and "spawned_at" in startup:
            spawned = startup["spawned_at"] - record["started_at"]
            ready = spawned + startup["total_s"]
            lines.append(
                f"worker spawned {spawned:.2f} s, ready {ready:.2f} s ({describe_startup(startup)})"
            )
    waited = f"{NEW_SANDBOX}/"
    for job in record.get("job_stages", []):
        if job["solution"] in seen:
            continue
        seen.add(job["solution"])
        phases = by_phase(job["ms"])
        parts = {p[len(waited) :]: ms for p, ms in job["ms"].items() if p.startswith(waited)}
        inner = ", ".join(f"{name} {ms:.0f}" for name, ms in parts.items() if ms >= 1)
        at = job.get("finished_at", record["started_at"]) - record["started_at"]
        shown = ", ".join(
            f"{name} {ms:.0f}" + (f" [{inner}]" if name == "sandbox_start" and inner else "")
            for name, ms in phases.items()
            if ms >= 1
        )
        lines.append(f"{job['solution']}: first job done {at:.2f} s in ({shown} ms)")
    return lines


def gpu_holders() -> set[int]:
    """Processes with a GPU device file open (/dev/nvidia0, ...): those with a CUDA context."""
    holders = set()
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            targets = [os.readlink(fd) for fd in (proc / "fd").iterdir()]
        except OSError:  # gone, or not ours to look at
            continue
        if any(t.startswith("/dev/nvidia") and t[len("/dev/nvidia") :].isdigit() for t in targets):
            holders.add(int(proc.name))
    return holders


def wait_for_gpu_processes(before: set[int], limit_s: float = 60.0) -> float:
    """Seconds until no process but this one and those in ``before`` holds a GPU."""
    started = time.perf_counter()
    while time.perf_counter() - started < limit_s:
        if not gpu_holders() - before - {os.getpid()}:
            break
        time.sleep(0.05)
    return round(time.perf_counter() - started, 3)


def print_run(record: dict[str, Any], expected: int) -> None:
    passed = record["statuses"].get("PASSED", 0)
    print(
        f"[{record['repeat']}] {record['tool']:<4} {record['label']:<5} {record['wall_s']:7.2f} s  "
        f"rc {record['returncode']}  traces {record['trace_count']}/{expected}  passed {passed}  "
        f"{record['statuses']}  (GPU free {record['teardown_s']:.2f} s after, untimed)",
        flush=True,
    )
    for failure in record["failures"]:
        print(f"    {failure['status']}: {failure['solution']} batch {failure['batch']}")
        print("      " + failure["log"].replace("\n", "\n      "))
    if "stderr_tail" in record or record.get("skipped"):
        print("    stderr tail:\n" + record.get("stderr_tail", "")[-1500:])
        for skipped in record.get("skipped", []):
            print(f"    skipped: {skipped}")
    for line in stage_table(record.get("stages", {})):
        print("    " + line)
    for line in first_jobs(record):
        print("    " + line)


def prime_page_cache(gpus: str | None) -> float:
    started = time.perf_counter()
    subprocess.run([sys.executable, "-c", PRIME_PAGE_CACHE], env=base_environment(gpus), check=True)
    return time.perf_counter() - started


def run_interleaved(setup: Setup, repeats: int) -> list[dict[str, Any]]:
    """Per repetition: peer cold, ours first, ours cold, peer warm, ours warm. Each tool has caches
    of its own, so that neither tool's cold run finds kernels the other compiled. Ours "first" is
    a cold run that also finds no bytecode of its own (as on a machine it never ran on)."""
    records = []
    for repeat in range(1, repeats + 1):
        caches = {tool: setup.work / f"caches-{repeat}-{tool}" for tool in setup.tools}
        for label in ("cold", "warm"):
            for tool in setup.tools:
                if tool == "ours" and label == "cold":
                    first = setup.work / f"caches-{repeat}-ours-first"
                    record = timed_run(setup, tool, "first", repeat, first)
                    print_run(record, setup.expected)
                    records.append(record)
                record = timed_run(setup, tool, label, repeat, caches[tool])
                print_run(record, setup.expected)
                records.append(record)
    return records


# -- what the runs say -----------------------------------------------------------------------


def summarize(records: list[dict[str, Any]], tools: list[str], expected: int) -> dict[str, Any]:
    summary: dict[str, Any] = {"bar": BAR}
    for label in ("first", "cold", "warm"):
        # The peer has no "first" run of its own: its cold run is the one to compare with.
        walls = {
            tool: [
                r["wall_s"]
                for r in records
                if r["tool"] == tool
                and r["label"] == ("cold" if label == "first" and tool == "peer" else label)
            ]
            for tool in tools
        }
        entry: dict[str, Any] = {f"{tool}_s": walls[tool] for tool in tools}
        entry.update({f"{tool}_median_s": statistics.median(walls[tool]) for tool in tools})
        if len(tools) == 2:
            # Paired by repetition: each pair ran back to back, under the same machine state.
            ratios = [ours / peer for peer, ours in zip(walls["peer"], walls["ours"], strict=True)]
            entry["ratios"] = ratios
            entry["ratio_median"] = statistics.median(ratios)
            entry["bar_met"] = entry["ratio_median"] <= BAR
            entry["bar_met_every_repeat"] = max(ratios) <= BAR
            if label == "first":
                entry["note"] = "not a bar: ours with its bytecode folder empty, against peer cold"
        summary[label] = entry
    summary["all_passed"] = {
        tool: all(
            r["statuses"] == {"PASSED": expected} and r["returncode"] == 0
            for r in records
            if r["tool"] == tool
        )
        for tool in tools
    }
    return summary


def latency_agreement(records: list[dict[str, Any]], batches: tuple[int, ...]) -> list[dict]:
    """Both tools' latency per solution and batch, from each one's last warm run."""
    last = {}
    for record in records:
        if record["label"] == "warm":
            last[record["tool"]] = record["timings"]
    if set(last) != {"peer", "ours"}:
        return []
    rows = []
    for suffix in SOLUTIONS:
        solution = f"{DEFINITION_NAME}_{suffix}"
        for batch in batches:
            peer = last["peer"].get(solution, {}).get(str(batch), {})
            ours = last["ours"].get(solution, {}).get(str(batch), {})
            peer_ms, ours_ms = peer.get("latency_ms"), ours.get("latency_ms")
            rows.append(
                {
                    "solution": solution,
                    "batch": batch,
                    "peer_ms": peer_ms,
                    "ours_ms": ours_ms,
                    "ours_over_peer": ours_ms / peer_ms if peer_ms and ours_ms else None,
                    "ours_eager_call_ms": ours.get("eager_call_ms"),
                    "ours_timing_mode": ours.get("timing_mode"),
                }
            )
    return rows


def print_summary(summary: dict[str, Any], agreement: list[dict], jobs: dict[str, Any]) -> None:
    from rich.console import Console
    from rich.table import Table

    tools = [tool for tool in ("peer", "ours") if f"{tool}_s" in summary["cold"]]
    console = Console(width=140)
    walls = Table(
        title=f"Wall time of the whole command, {len(jobs['solutions'])} solutions x "
        f"{len(jobs['batches'])} workloads (s)"
    )
    for column in ("run", *tools, "ours / peer", f"bar <= {BAR}"):
        walls.add_column(column, justify="left" if column == "run" else "right")
    for label in ("first", "cold", "warm"):
        entry = summary[label]
        cells = [", ".join(f"{w:.2f}" for w in entry[f"{tool}_s"]) for tool in tools]
        ratio = ", ".join(f"{r:.2f}" for r in entry.get("ratios", []))
        verdict = {True: "met", False: "missed"}.get(entry.get("bar_met"), "")
        if label == "first":
            verdict = "(no bar)"
            label = "first (ours: no bytecode; peer: cold)"
        walls.add_row(label, *cells, ratio, verdict)
    console.print(walls)
    console.print(f"every trace PASSED, every run exit 0: {summary['all_passed']}")
    if not agreement:
        return
    latencies = Table(title="Latency per solution and batch, last warm runs (us)")
    columns = ("solution", "batch", "flashinfer-bench mean", "kernelarena median", "ratio")
    for column in (*columns, "kernelarena eager call", "kernelarena mode"):
        latencies.add_column(column, justify="left" if column == "solution" else "right")
    for row in agreement:
        peer, ours, eager = row["peer_ms"], row["ours_ms"], row["ours_eager_call_ms"]
        latencies.add_row(
            row["solution"].removeprefix(f"{DEFINITION_NAME}_"),
            str(row["batch"]),
            f"{peer * 1e3:.1f}" if peer else "-",
            f"{ours * 1e3:.1f}" if ours else "-",
            f"{row['ours_over_peer']:.2f}" if row["ours_over_peer"] else "-",
            f"{eager * 1e3:.1f}" if eager else "-",
            row["ours_timing_mode"] or "-",
        )
    console.print(latencies)


# -- the dry run -----------------------------------------------------------------------------


def kernelarena_cli(*arguments: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "kernelarena.cli", *arguments],
        capture_output=True,
        text=True,
        check=False,
    )


def planned_jobs(dataset: Path, on_gpu: bool) -> int:
    """The jobs ``kernelarena run rmsnorm_h4096 --suite all`` plans here (the built-in library
    loaded alongside, as the command does)."""
    from kernelarena.datasets import load_default
    from kernelarena.evaluate.executors.runner import plan

    combined, _ = load_default(dataset)
    return len(plan(combined, [DEFINITION_NAME], None, "all", on_gpu))


def dry_run(dataset: Path, trace_set: TraceSet, commands: dict[str, list[str]]) -> bool:
    """Load the dataset with both tools, show kernelarena's view of it and the commands."""
    workloads = sum(len(w) for w in trace_set.workloads.values())
    solutions = sum(len(s) for s in trace_set.solutions.values())
    print(
        f"flashinfer_bench TraceSet.from_path({dataset}): {len(trace_set.definitions)} "
        f"definition(s) {sorted(trace_set.definitions)}, {solutions} solutions, "
        f"{workloads} workloads, {sum(len(t) for t in trace_set.traces.values())} traces"
    )
    validate = kernelarena_cli("validate", str(dataset))
    print(f"$ kernelarena validate {dataset}  (exit {validate.returncode})")
    print((validate.stdout + validate.stderr).rstrip())
    listing = kernelarena_cli("list", "--dataset", str(dataset))
    print(f"$ kernelarena list --dataset {dataset}  (exit {listing.returncode}; the built-in")
    print("  library's rows left out: list shows it alongside the dataset)")
    for line in (listing.stdout + listing.stderr).splitlines():
        if DEFINITION_NAME in line or " name " in line:
            print(line.rstrip())
    jobs = planned_jobs(dataset, on_gpu=True)
    expected = len(SOLUTIONS) * workloads
    print(f"kernelarena plans {jobs} jobs on a GPU (expected {expected})")
    print("commands, per repetition (traces/ cleared before each):")
    for label in ("cold", "warm"):
        for tool, variables in (("peer", "FIB_CACHE_PATH"), ("ours", "KERNELARENA_CACHE")):
            caches = f"{'a new' if label == 'cold' else 'the same'} {variables}, TRITON_CACHE_DIR"
            print(f"  {tool} {label} ({caches}): {shown(commands[tool])}")
    return validate.returncode == 0 and listing.returncode == 0 and jobs == expected


# -- main ------------------------------------------------------------------------------------


def versions(git_rev: str | None) -> dict[str, str]:
    found = {"flashinfer_bench": importlib.metadata.version("flashinfer-bench")}
    found["kernelarena_git_rev"] = kernelarena_git_rev(git_rev)
    found["sandbox_walls"] = sandbox_walls()
    return found


def parse_arguments() -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--repeat", type=int, default=1, help="repetitions of the four runs")
    parser.add_argument("--dry-run", action="store_true", help="build and check, print commands")
    parser.add_argument(
        "--gpus", default="0", help="CUDA_VISIBLE_DEVICES for both tools (default: 0)"
    )
    parser.add_argument(
        "--batches",
        type=int,
        nargs="+",
        help="batch sizes (default: 1-8192 on a GPU and for --dry-run, 1-8 on a CPU)",
    )
    parser.add_argument("--dataset-dir", type=Path, help="build the dataset here and keep it")
    parser.add_argument("--git-rev", help="kernelarena's revision for the results file")
    parser.add_argument(
        "--run-timeout", type=float, default=300.0, help="seconds one tool's run may take"
    )
    parser.add_argument(
        "--label", default="", help="suffix of the results file (..._<date>_<label>.json)"
    )
    return parser.parse_args()


def fresh_folder(path: Path) -> Path:
    """A --dataset-dir is emptied only when it holds a dataset this script built."""
    ours = path / "definitions" / OP_TYPE / f"{DEFINITION_NAME}.json"
    if path.exists() and any(path.iterdir()) and not ours.is_file():
        raise SystemExit(f"--dataset-dir {path} is not empty and not a dataset built here")
    return path


def described_device(gpus: str | None) -> torch.device:
    """The device the tools ran on, as this process numbers it (it sees every GPU)."""
    if gpus is None:
        return torch.device("cpu")
    first = gpus.split(",")[0]
    index = int(first) if first.isdigit() and int(first) < torch.cuda.device_count() else 0
    return torch.device("cuda", index)


def build_report(
    setup: Setup, records: list[dict[str, Any]], batches: tuple[int, ...], git_rev: str | None
) -> dict[str, Any]:
    return {
        "benchmark": "vs_flashinfer_bench",
        "environment": environment(described_device(setup.gpus)) | versions(git_rev),
        "python_bytecode": python_bytecode(),
        "jobs": {
            "definition": DEFINITION_NAME,
            "solutions": [f"{DEFINITION_NAME}_{suffix}" for suffix in SOLUTIONS],
            "batches": list(batches),
            "per_run": setup.expected,
        },
        "commands": {tool: shown(setup.commands[tool]) for tool in setup.tools},
        # Ours with several judges a GPU (``evaluate.judge.device_lock``), where set.
        "judges_per_gpu": int(os.environ.get("KERNELARENA_JUDGES_PER_GPU", "1")),
        "gpus": setup.gpus,
        "order": "per repetition: peer cold, ours first, ours cold, peer warm, ours warm",
        "runs": records,
        "summary": summarize(records, setup.tools, setup.expected),
        "latency_agreement": latency_agreement(records, batches),
    }


def main() -> None:
    arguments = parse_arguments()
    on_gpu = torch.cuda.is_available()
    # FlashInfer-Bench's runner needs CUDA ("No CUDA devices available"): on a CPU only ours runs.
    tools = ["peer", "ours"] if on_gpu else ["ours"]
    batches = tuple(arguments.batches or (BATCHES if on_gpu or arguments.dry_run else CPU_BATCHES))
    work = Path(tempfile.mkdtemp(prefix="kernelarena-vs-fib-"))
    dataset = fresh_folder(arguments.dataset_dir) if arguments.dataset_dir else work / "dataset"
    # A dry run shows the GPU commands wherever it runs: they are what it prepares for.
    device = "cuda" if on_gpu or arguments.dry_run else "cpu"
    commands = {"peer": peer_command(dataset), "ours": ours_command(dataset, device)}
    setup = Setup(
        tools=tools,
        commands=commands,
        dataset=dataset,
        work=work,
        gpus=arguments.gpus if on_gpu else None,
        expected=len(SOLUTIONS) * len(batches),
        run_timeout_s=arguments.run_timeout,
        gpu_holders_before=gpu_holders() if on_gpu else set(),
    )
    try:
        trace_set = build_dataset(dataset, batches)
        if arguments.dry_run:
            sys.exit(0 if dry_run(dataset, trace_set, commands) else 1)
        primed_s = prime_page_cache(setup.gpus)
        print(
            f"dataset {dataset}: {setup.expected} jobs a run; tools {tools}; GPUs {setup.gpus}; "
            f"imports primed in {primed_s:.1f} s (untimed)",
            flush=True,
        )
        records = run_interleaved(setup, arguments.repeat)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    report = build_report(setup, records, batches, arguments.git_rev)
    report["priming_s"] = primed_s
    print_summary(report["summary"], report["latency_agreement"], report["jobs"])
    print("wrote", write_report("vs_flashinfer_bench", report, arguments.label))


if __name__ == "__main__":
    main()
