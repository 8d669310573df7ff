"""The worker process: the judge of one device. It never imports solution code.

One persistent worker per device. The parent sends jobs over a pipe as JSON-ready dicts; the worker
answers ``(STAGE, id, "running")`` once the solution is built (so the parent's run timeout starts
after compilation) and ``(RESULT, id, outcome)`` when done (the tags: ``messages``). Solutions run
in sandbox processes the worker starts (``sandboxes``), one per solution; what they print, and what
a crash prints from C code, goes to their log files, and each trace gets the part written during
its job. The worker is
undumpable and a child subreaper (``confine.guard_judge``).
"""

from __future__ import annotations

import contextlib
import os
import signal
import sys
import threading
import time
import traceback
from collections.abc import Callable
from multiprocessing.connection import Connection
from pathlib import Path
from typing import TYPE_CHECKING, Any

from kernelarena.evaluate.messages import Message
from kernelarena.evaluate.process_output import (
    LOG_TAIL,
    make_cuda_context,
    read_tail,
    redirect_output,
)

if TYPE_CHECKING:
    from kernelarena.evaluate.judge.evaluator import Evaluator


def worker_main(
    conn: Connection,
    device_name: str,
    log_path: str,
    measure_ceilings: bool,
    gpu_lock: str | None = None,
) -> None:
    """``gpu_lock``: the file of the lock this judge shares with the GPU's other judges
    (``device_lock``), where the run has several a GPU."""
    entered = time.time()
    redirect_output(log_path)
    _exit_with_parent()
    evaluator, environment, phases_s = _start_judge(
        device_name, log_path, measure_ceilings, gpu_lock
    )
    startup = {"phases_s": phases_s, "entered_at": entered, "ready_at": time.time()}
    print(f"kernelarena worker on {device_name} ready: {describe_startup(startup)}", flush=True)
    conn.send((Message.READY, environment, startup))
    profile_dir = os.environ.get("KERNELARENA_WORKER_PROFILE")
    if profile_dir:  # a development aid: where a run's time goes inside the worker
        _serve_profiled(conn, evaluator, log_path, Path(profile_dir))
    else:
        _serve(conn, evaluator, log_path)
    evaluator.close()
    # Done: every result is sent, the sandboxes are killed and the log flushed. Skipping the
    # interpreter's teardown saves ~0.5 s; the kernel's teardown of the CUDA context (0.3-0.4 s on
    # an H100, with the sandboxes' going at once) is left to happen after "closed", which tells
    # the executor that it need not wait for it.
    sys.stdout.flush()
    sys.stderr.flush()
    with contextlib.suppress(OSError):
        conn.send((Message.CLOSED,))
    os._exit(0)


def _start_judge(
    device_name: str, log_path: str, measure_ceilings: bool, gpu_lock: str | None = None
) -> tuple[Evaluator, dict[str, Any], dict[str, float]]:
    """Confine this process, start the first sandbox, import torch, make the device's context and
    measure its ceilings: the evaluator, the environment traces record, and each phase's seconds."""
    from kernelarena.evaluate.judge.clocked_sandboxes import ClockedSandboxes
    from kernelarena.evaluate.sandbox.confine import guard_judge

    guard_judge()
    # The first sandbox starts now, beside this process's own start-up.
    sandboxes = ClockedSandboxes(device_name, Path(log_path).parent, _sandbox_writable())
    if not device_name.startswith("cuda"):
        # The Triton interpreter must be chosen before any kernel module is imported.
        os.environ.setdefault("TRITON_INTERPRET", "1")
    else:
        threading.Thread(
            target=make_cuda_context, args=(device_name,), name="cuda-context", daemon=True
        ).start()
    phases = _Phases()
    import torch

    phases.done("import_torch_s")
    from kernelarena.evaluate.judge import ceilings as ceilings_module
    from kernelarena.evaluate.judge.device_lock import NO_LOCK, DeviceLock
    from kernelarena.evaluate.judge.evaluator import Evaluator
    from kernelarena.runtime.hardware import describe

    phases.done("import_kernelarena_s")
    device = torch.device(device_name)
    if device.type == "cuda":
        torch.cuda.set_device(device)
        # The context is made by the first call that needs it: here, so that it counts as CUDA init.
        torch.cuda.synchronize(device)
        phases.done("cuda_init_s")
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    gpu = DeviceLock(gpu_lock) if gpu_lock else NO_LOCK
    with gpu.exclusive():
        ceilings = ceilings_module.measure_ceilings(device) if measure_ceilings else {}
    phases.done("ceilings_s")
    environment = describe(device, ceilings)
    evaluator = Evaluator(device, environment, sandboxes, gpu)
    print(f"kernelarena worker on {device_name}: arena of {evaluator.arena.sharing}", flush=True)
    if device.type == "cuda":
        # The warm-up's thread holds a lock of its own: threads would share one open file's.
        evaluator.warm_up_in_background(
            DeviceLock(gpu_lock, clocked=False) if gpu_lock else NO_LOCK
        )
    phases.done("environment_s")
    return evaluator, environment, phases.seconds


def _serve_profiled(conn: Connection, evaluator: Evaluator, log_path: str, folder: Path) -> None:
    """``_serve`` under cProfile, its statistics written to ``folder/worker-<pid>.prof``."""
    import cProfile

    profiler = cProfile.Profile()
    profiler.enable()
    try:
        _serve(conn, evaluator, log_path)
    finally:
        profiler.disable()
        folder.mkdir(parents=True, exist_ok=True)
        profiler.dump_stats(str(folder / f"worker-{os.getpid()}.prof"))


def _serve(conn: Connection, evaluator: Evaluator, log_path: str) -> None:
    """Answers jobs until the parent says stop or goes away. Each result carries where the job's
    time went (``stage_clock``), with ``idle``, the wait for the job since the last reply (the
    executor's latency, or builds not done), and ``sent_at``, the ``time.monotonic`` of the reply,
    a clock every process of the host shares."""
    from kernelarena.evaluate.judge.stage_clock import JOB_STAGES

    idle_since = time.monotonic()
    while True:
        try:
            message = conn.recv()
        except EOFError:
            return
        if message[0] == Message.STOP:
            return
        idle = time.monotonic() - idle_since
        JOB_STAGES.begin("decode")
        _, job_id, payload = message
        result = _evaluate(conn, evaluator, log_path, job_id, payload)
        result["stages"] = dict(JOB_STAGES.take(), idle=round(idle, 6))
        result["sent_at"] = time.monotonic()
        conn.send((Message.RESULT, job_id, result))
        idle_since = time.monotonic()
        if result["fatal"]:
            evaluator.close()
            sys.stdout.flush()
            os._exit(3)


def _evaluate(
    conn: Connection, evaluator: Evaluator, log_path: str, job_id: int, payload: dict[str, Any]
) -> dict[str, Any]:
    """One job's result for the executor: its trace as JSON, or the fault of kernelarena's own."""
    from kernelarena.evaluate.judge.stage_clock import JOB_STAGES
    from kernelarena.evaluate.options import Job

    start = _log_size(log_path)
    try:
        job = Job.from_payload(job_id, payload)
        JOB_STAGES.switch("sandbox_start")
        outcome = evaluator.evaluate(job, notify=_notifier(conn, job_id))
    except Exception:  # a fault of kernelarena itself: report it, keep serving
        return {"internal_error": traceback.format_exc(), "fatal": False}
    JOB_STAGES.switch("reply")
    printed = _read_from(log_path, start)
    result: dict[str, Any] = {"skipped": outcome.skipped, "fatal": outcome.fatal, "trace": None}
    if outcome.trace is not None:
        trace = outcome.trace
        if printed.strip() and trace.evaluation is not None:
            trace.evaluation.log = (trace.evaluation.log + "\n--- output ---\n" + printed)[-8000:]
        result["trace"] = trace.to_json_dict()
    return result


class _Phases:
    """Seconds spent in each start-up phase, in order."""

    def __init__(self) -> None:
        self.seconds: dict[str, float] = {}
        self._last = time.perf_counter()

    def done(self, name: str) -> None:
        now = time.perf_counter()
        self.seconds[name] = round(now - self._last, 4)
        self._last = now


def describe_startup(startup: dict[str, Any]) -> str:
    """'3.31 s: python 0.05 s, import torch 2.56 s, ...' from a ready message's start-up record
    (``total_s`` and ``python_s`` are there once the parent has added them)."""
    parts = {"python_s": startup.get("python_s"), **startup.get("phases_s", {})}
    shown = ", ".join(
        f"{name.removesuffix('_s').replace('_', ' ')} {value:.2f} s"
        for name, value in parts.items()
        if value is not None
    )
    total = startup.get("total_s")
    return f"{total:.2f} s: {shown}" if total is not None else shown


def _notifier(conn: Connection, job_id: int) -> Callable[[str], None]:
    from kernelarena.evaluate.judge.stage_clock import JOB_STAGES

    def notify(stage: str) -> None:
        if stage == "running":  # built: the checks begin
            JOB_STAGES.switch("checks")
        conn.send((Message.STAGE, job_id, stage))

    return notify


def _exit_with_parent() -> None:
    """Die with the executor. A worker orphaned mid-job (its parent SIGKILLed: a Ray actor on a lost
    node, a killed ``kernelarena run``) would otherwise keep a hanging solution running, and holding
    its GPU, forever; an idle one already exits when its pipe closes."""
    parent = os.getppid()

    def watch() -> None:
        while os.getppid() == parent:
            time.sleep(1.0)
        os.killpg(0, signal.SIGKILL)  # the worker leads its own group: it and all it started

    threading.Thread(target=watch, name="exit-with-parent", daemon=True).start()


def _sandbox_writable() -> list[str]:
    """The folders a sandbox may change: the sandboxes' caches (each narrows this to its own
    solution's folder before the solution is built, ``solution_caches.enter``) and /dev (device
    files, shared memory; the arena is not there: its memory has no name, ``arena``). Its own
    temporary folder is added per sandbox. Everything
    else, the trusted build caches, the datasets and kernelarena's own files included, is
    read-only to solution code where the kernel has Landlock."""
    from kernelarena.compile.cache import sandbox_caches_root

    root = sandbox_caches_root()
    # A folder that cannot be made here cannot be written by a sandbox either.
    with contextlib.suppress(OSError):
        root.mkdir(parents=True, exist_ok=True)
    return [str(root), "/dev"]


def _log_size(path: str) -> int:
    sys.stdout.flush()
    sys.stderr.flush()
    try:
        return os.path.getsize(path)
    except OSError:
        return 0


def _read_from(path: str, offset: int) -> str:
    sys.stdout.flush()
    sys.stderr.flush()
    return read_tail(path, LOG_TAIL, since=offset)


def main(argv: list[str]) -> None:
    fd, device, log_path = int(argv[0]), argv[1], argv[2]
    gpu_lock = argv[argv.index("--gpu-lock") + 1] if "--gpu-lock" in argv else None
    worker_main(Connection(fd), device, log_path, "--no-ceilings" not in argv, gpu_lock=gpu_lock)


if __name__ == "__main__":
    main(sys.argv[1:])
