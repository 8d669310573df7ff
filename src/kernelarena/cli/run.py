"""``kernelarena run``: plan the jobs, start the workers, show progress and the tables."""

from __future__ import annotations

import json
import os
import sys
from dataclasses import dataclass
from typing import TYPE_CHECKING, Annotated, Optional

import typer
from rich.console import Console

from kernelarena.cli.common import (
    DatasetOption,
    ImportOption,
    LibraryOption,
    _split,
    app,
    check_dataset_folder,
    console,
    errors,
    fail,
    import_user_modules,
    load,
    say,
    select_or_exit,
)
from kernelarena.cli.run_notes import (
    cpu_check_options,
    finish,
    json_summary,
    print_left_out,
    print_results,
    why_nothing_runs,
)
from kernelarena.cli.selection import dataset_selection
from kernelarena.evaluate.executors.jobs import Job, Timeouts
from kernelarena.evaluate.executors.local import LocalExecutor

if TYPE_CHECKING:
    from kernelarena.data import Definition, TraceSet
    from kernelarena.evaluate.executors.ray_executor import RayExecutor
    from kernelarena.evaluate.executors.runner import Executor, Plan, RunSummary


@app.command(short_help="Check and time solutions, appending a trace for each.")
def run(
    names: Annotated[
        Optional[list[str]],
        typer.Argument(
            metavar="NAMES",
            help="definitions, families or op_types (default: those of --dataset; without "
            "--dataset, the built-in library and your default dataset)",
        ),
    ] = None,
    solutions: Annotated[
        Optional[list[str]],
        typer.Option(
            "--solutions",
            "-s",
            metavar="NAME",
            help="only these solutions: names, suffixes or languages (repeatable, or a,b)",
        ),
    ] = None,
    suite: Annotated[
        Optional[str],
        typer.Option(
            "--suite",
            metavar="SUITE",
            help="smoke, correctness, performance, all, or a workload tag of yours (default: "
            "smoke on a CPU, all on a GPU)",
        ),
    ] = None,
    device: Annotated[
        Optional[str],
        typer.Option("--device", metavar="DEVICE", help="cpu, cuda (every GPU), or cuda:0,cuda:1"),
    ] = None,
    dataset: DatasetOption = None,
    library: LibraryOption = False,
    resume: Annotated[
        bool, typer.Option("--resume", help="skip jobs whose traces are already in the dataset")
    ] = False,
    as_json: Annotated[
        bool, typer.Option("--json", help="print the traces as JSON on stdout")
    ] = False,
    trials: Annotated[
        int,
        typer.Option("--trials", metavar="N", help="checks with fresh random inputs per workload"),
    ] = 3,
    timeout: Annotated[
        float,
        typer.Option("--timeout", metavar="SECONDS", help="time a job may run after its build"),
    ] = 300.0,
    build_timeout: Annotated[
        float, typer.Option("--build-timeout", metavar="SECONDS", help="time a build may take")
    ] = 900.0,
    no_timing: Annotated[bool, typer.Option("--no-timing", help="check correctness only")] = False,
    allow_failures: Annotated[
        bool, typer.Option("--allow-failures", help="exit 0 even when a solution fails")
    ] = False,
    executor: Annotated[
        str,
        typer.Option("--executor", metavar="local|ray", help="a worker per local device, or Ray"),
    ] = "local",
    address: Annotated[
        Optional[str],
        typer.Option(
            "--address",
            metavar="ADDRESS",
            help="Ray address for --executor ray (auto, ray://host:port)",
        ),
    ] = None,
    ray_resources: Annotated[
        Optional[str],
        typer.Option(
            "--ray-resources",
            metavar="JSON",
            help="Ray resources each job asks for besides its GPU, as JSON: '{\"H100\": 1}'",
        ),
    ] = None,
    ray_accelerator: Annotated[
        Optional[str],
        typer.Option(
            "--ray-accelerator",
            metavar="MODEL",
            help="GPU model the Ray jobs need: H100, H200, A100, ...",
        ),
    ] = None,
    ray_label: Annotated[
        Optional[list[str]],
        typer.Option(
            "--ray-label",
            metavar="KEY=VALUE",
            help="node label KEY=VALUE the Ray jobs need (repeatable)",
        ),
    ] = None,
    ray_workers: Annotated[
        Optional[int],
        typer.Option(
            "--ray-workers", metavar="N", help="Ray actors to start (default: as many as fit)"
        ),
    ] = None,
    imports: ImportOption = None,
) -> None:
    """Check and time solutions on workloads, appending a trace for each.

    Builds each solution, checks it against the reference on fresh random inputs, times it
    (on a GPU; on a CPU the times are checks, not rankings), and appends one trace per solution
    and workload to the dataset."""
    check_dataset_folder(dataset)
    import_user_modules(imports or [])
    out = errors if as_json else console
    workers = _Workers(
        kind=executor,
        device=device,
        timeouts=Timeouts(build_s=build_timeout, run_s=timeout),
        address=address,
        ray_resources=ray_resources,
        ray_accelerator=ray_accelerator,
        ray_labels=ray_label,
        ray_workers=ray_workers,
    )
    asked = _Asked(
        names=names,
        solutions=_split(solutions),
        suite=suite,
        dataset=dataset,
        library=library,
        trials=trials,
        timing=not no_timing,
    )
    planned = _plan(workers, asked)
    _say_what_runs(planned, out)
    summary = _run_with_progress(planned.made.jobs, planned.executor, planned.user, resume, out)
    if as_json:
        sys.stdout.write(json.dumps(json_summary(summary, planned.made)) + "\n")
    else:
        print_results(planned.combined, summary, planned.on_gpu, console)
    finish(summary, planned.made, out, allow_failures)


@dataclass(frozen=True)
class _Workers:
    """Where the jobs run: ``--executor`` and the options that go with it."""

    kind: str
    device: str | None
    timeouts: Timeouts
    address: str | None = None
    ray_resources: str | None = None
    ray_accelerator: str | None = None
    ray_labels: list[str] | None = None
    ray_workers: int | None = None


@dataclass(frozen=True)
class _Asked:
    """What the command line asks to run, and how to check it."""

    names: list[str] | None
    solutions: list[str] | None
    suite: str | None
    dataset: str | None
    library: bool
    trials: int
    timing: bool


@dataclass(frozen=True)
class _Planned:
    """The started executor and the jobs planned for it."""

    executor: Executor
    devices: list[str]
    on_gpu: bool
    combined: TraceSet
    user: TraceSet
    definitions: list[Definition]
    made: Plan
    suite: str


def _plan(workers: _Workers, asked: _Asked) -> _Planned:
    """Start the executor first (its workers import torch while this process loads the datasets),
    then plan the jobs; on an error the executor is closed and the command exits saying why."""
    started: Executor | None = None
    try:
        started, devices, on_gpu = _start_executor(workers)
        from kernelarena.evaluate.executors.runner import make_plan
        from kernelarena.evaluate.options import Options, within_job_time

        combined, user = load(asked.dataset)
        suite = asked.suite or ("all" if on_gpu else "smoke")
        options = Options(trials=asked.trials, timing=asked.timing)
        options = within_job_time(options, workers.timeouts.run_s)
        if not on_gpu:  # a check's times: a few samples say what a hundred would
            options = cpu_check_options(options)
        selection = dataset_selection(user, asked.names, asked.dataset, asked.library)
        definitions = select_or_exit(combined, selection.names, asked.dataset)
        made = make_plan(combined, selection.names, asked.solutions, suite, on_gpu, options)
        selection.limit(made)
    except (ValueError, ImportError, RuntimeError, ConnectionError, typer.Exit) as error:
        if started is not None:
            started.close()
        if isinstance(error, typer.Exit):
            raise
        fail(str(error))
    return _Planned(started, devices, on_gpu, combined, user, definitions, made, suite)


def _say_what_runs(planned: _Planned, out: Console) -> None:
    """The plan in one line and what it leaves out; with no job, why, and exit 1."""
    from kernelarena.report.progress import plan_summary

    devices, made = planned.devices, planned.made
    several_cpus = len(devices) > 1 and set(devices) == {"cpu"}
    where = f"cpu ({len(devices)} workers)" if several_cpus else ", ".join(devices)
    say(out, f"{plan_summary(made.jobs)} on {where}; traces go to {planned.user.root}")
    from kernelarena.evaluate.options import REFERENCES_UNCONFINED, references_sandboxed

    if not references_sandboxed() and os.environ.get("KERNELARENA_UNCONFINED") != "1":
        say(out, REFERENCES_UNCONFINED, "yellow")
    print_left_out(made, planned.combined, out)
    if not made.jobs:
        planned.executor.close()
        for line in why_nothing_runs(
            planned.combined, planned.definitions, made, planned.suite, planned.on_gpu
        ):
            say(out, f"no job: {line}", "red")
        raise typer.Exit(1)


def _run_with_progress(
    jobs: list[Job], executor: Executor, user: TraceSet, resume: bool, out: Console
) -> RunSummary:
    """Run the jobs with a live progress line (plain lines when ``out`` is no terminal); the
    executor is closed either way."""
    from kernelarena.data import DatasetError
    from kernelarena.evaluate.executors.runner import run_jobs
    from kernelarena.report.progress import RunProgress

    try:
        with RunProgress(jobs, out) as progress:
            return run_jobs(jobs, executor, user, resume=resume, on_progress=progress.on_progress)
    except (RuntimeError, DatasetError) as error:
        errors.print(f"[red]{error}[/red]")
        raise typer.Exit(1) from None
    finally:
        executor.close()


def _start_executor(workers: _Workers) -> tuple[Executor, list[str], bool]:
    """The executor, launched (its workers import torch while this process loads the datasets),
    the devices it runs on, and whether they are GPUs."""
    if workers.kind == "ray":
        # The cluster decides where jobs run, and so whether the plan is for GPUs: a laptop
        # without one still plans the GPU suites for a Ray head on a GPU box.
        ray_executor = _ray_executor(workers)
        on_gpu = ray_executor.uses_gpu()
        cluster = workers.address or "this machine"
        return (
            ray_executor,
            [f"the Ray cluster at {cluster} ({'GPU' if on_gpu else 'CPU'})"],
            on_gpu,
        )
    if (
        workers.ray_resources
        or workers.ray_accelerator
        or workers.ray_labels
        or workers.ray_workers
    ):
        raise ValueError("--ray-* options need --executor ray")
    from kernelarena.evaluate.executors.devices import resolve_devices

    devices = resolve_devices(workers.device)
    if workers.device in (None, "", "auto") and devices == ["cpu"]:
        devices = ["cpu"] * cpu_check_workers()
    local = _executor(workers.kind, devices, workers.timeouts)
    local.launch()
    return local, devices, any(d.startswith("cuda") for d in devices)


def cpu_check_workers() -> int:
    """Workers for a run without a GPU (and without --device): one per core, up to four. A CPU's
    times are checks that rank nothing, so its workers may share it: on two cores the built-in
    library's smoke run took 4 minutes instead of 10 on a loaded machine."""
    return max(1, min(4, os.cpu_count() or 1))


def _executor(kind: str, devices: list[str], timeouts: Timeouts) -> LocalExecutor:
    if kind == "local":
        return LocalExecutor(devices, timeouts)
    errors.print(f"[red]--executor: '{kind}' is not 'local' or 'ray'[/red]")
    raise typer.Exit(2)


def _ray_executor(workers: _Workers) -> RayExecutor:
    from kernelarena.evaluate.executors.ray_executor import RayExecutor

    device, resources = workers.device, workers.ray_resources
    if device not in (None, "", "auto", "cpu", "cuda"):
        raise ValueError(
            f"--device '{device}' with --executor ray: give auto, cpu or cuda; Ray assigns the GPUs"
        )
    asked = json.loads(resources) if resources else {}  # a JSONDecodeError is a ValueError
    if not isinstance(asked, dict):
        raise ValueError(
            f"--ray-resources: a JSON object such as '{{\"H100\": 1}}', not {resources}"
        )
    selector = {}
    for label in workers.ray_labels or []:
        key, equals, value = label.partition("=")
        if not equals:
            raise ValueError(f"--ray-label: '{label}' is not KEY=VALUE")
        selector[key] = value
    return RayExecutor(
        address=workers.address,
        timeouts=workers.timeouts,
        device=device or "auto",
        resources=asked,
        accelerator_type=workers.ray_accelerator,
        label_selector=selector,
        workers=workers.ray_workers,
    )
