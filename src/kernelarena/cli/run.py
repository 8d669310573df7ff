"""``kernelarena run``: plan the jobs, start the workers, show progress and the tables."""

from __future__ import annotations

import json
import sys
from dataclasses import dataclass
from typing import TYPE_CHECKING, Annotated, Optional

import typer
from rich.console import Console

from kernelarena.cli.common import (
    DatasetOption,
    LibraryOption,
    _split,
    _warn_problems,
    app,
    console,
    errors,
)
from kernelarena.evaluate.jobs import Job, Timeouts
from kernelarena.evaluate.local import LocalExecutor
from kernelarena.evaluate.worker import describe_startup

if TYPE_CHECKING:
    from kernelarena.data import TraceSet
    from kernelarena.evaluate.ray_executor import RayExecutor
    from kernelarena.evaluate.runner import Executor, RunSummary


@app.command()
def run(
    names: Annotated[
        Optional[list[str]],
        typer.Argument(
            help="definitions, families or op_types (default: those of --dataset; without "
            "--dataset, the built-in library and your default dataset)"
        ),
    ] = None,
    solutions: Annotated[
        Optional[list[str]],
        typer.Option("--solutions", "-s", help="solution names, suffixes or languages"),
    ] = None,
    suite: Annotated[
        Optional[str],
        typer.Option(
            help="smoke | correctness | performance | all (default: smoke on CPU, all on GPU)"
        ),
    ] = None,
    device: Annotated[
        Optional[str], typer.Option("--device", help="cpu, cuda (every GPU), or cuda:0,cuda:1")
    ] = None,
    dataset: DatasetOption = None,
    library: LibraryOption = False,
    resume: Annotated[
        bool, typer.Option(help="skip jobs whose traces are already in the dataset")
    ] = False,
    as_json: Annotated[
        bool, typer.Option("--json", help="print the traces as JSON on stdout")
    ] = False,
    trials: Annotated[int, typer.Option(help="checks with fresh random inputs per workload")] = 3,
    timeout: Annotated[float, typer.Option(help="seconds a job may run after its build")] = 300.0,
    build_timeout: Annotated[float, typer.Option(help="seconds a build may take")] = 900.0,
    no_timing: Annotated[bool, typer.Option("--no-timing", help="check correctness only")] = False,
    allow_failures: Annotated[
        bool, typer.Option("--allow-failures", help="exit 0 even when a solution fails")
    ] = False,
    executor: Annotated[str, typer.Option(help="local (worker per device) or ray")] = "local",
    address: Annotated[
        Optional[str], typer.Option(help="Ray address for --executor ray (auto, ray://host:port)")
    ] = None,
    ray_resources: Annotated[
        Optional[str],
        typer.Option(
            "--ray-resources",
            help="Ray resources each job asks for besides its GPU, as JSON: '{\"H100\": 1}'",
        ),
    ] = None,
    ray_accelerator: Annotated[
        Optional[str],
        typer.Option(
            "--ray-accelerator", help="GPU model the Ray jobs need: H100, H200, A100, ..."
        ),
    ] = None,
    ray_label: Annotated[
        Optional[list[str]],
        typer.Option("--ray-label", help="node label KEY=VALUE the Ray jobs need (repeatable)"),
    ] = None,
    ray_workers: Annotated[
        Optional[int],
        typer.Option("--ray-workers", help="Ray actors to start (default: as many as fit)"),
    ] = None,
    imports: Annotated[
        Optional[list[str]],
        typer.Option(
            "--import",
            help="a module of yours that calls kernelarena.register (repeatable); it is imported "
            "here to learn its solutions, which still run only in the workers",
        ),
    ] = None,
) -> None:
    """Evaluate solutions on workloads: build, check, time, and append a trace for each."""
    _import_user_modules(imports or [])
    from kernelarena.evaluate.devices import resolve_devices
    from kernelarena.evaluate.options import Options

    out = errors if as_json else console
    timeouts = Timeouts(build_s=build_timeout, run_s=timeout)
    runner_executor: Executor | None = None
    try:
        if executor == "ray":
            # The cluster decides where jobs run, and so whether the plan is for GPUs: a laptop
            # without one still plans the GPU suites for a Ray head on a GPU box.
            ray_executor = _ray_executor(
                address, device, timeouts, ray_resources, ray_accelerator, ray_label, ray_workers
            )
            runner_executor = ray_executor
            on_gpu = ray_executor.uses_gpu()
            devices = [
                f"the Ray cluster at {address or 'this machine'} ({'GPU' if on_gpu else 'CPU'})"
            ]
        else:
            if ray_resources or ray_accelerator or ray_label or ray_workers:
                raise ValueError("--ray-* options need --executor ray")
            devices = resolve_devices(device)
            on_gpu = any(d.startswith("cuda") for d in devices)
            runner_executor = _executor(executor, devices, timeouts)
            runner_executor.launch()  # workers import torch while this process loads the datasets
        from kernelarena.datasets import load_default
        from kernelarena.evaluate.runner import plan

        combined, user = load_default(dataset)
        _warn_problems(combined)
        options = Options(trials=trials, timing=not no_timing)
        chosen_suite = suite or ("all" if on_gpu else "smoke")
        selection = _selection(user, names, dataset, library)
        jobs = plan(combined, selection.names, _split(solutions), chosen_suite, on_gpu, options)
        jobs = [job for job in jobs if selection.keeps(job)]
    except (ValueError, ImportError, RuntimeError, ConnectionError) as error:  # PlanError too
        if runner_executor is not None:
            runner_executor.close()
        errors.print(str(error), style="red", markup=False, highlight=False, soft_wrap=True)
        raise typer.Exit(2) from None
    from kernelarena.evaluate.runner import failed_statuses
    from kernelarena.report.console import failure_details, run_tables
    from kernelarena.report.progress import plan_summary

    out.print(
        f"{plan_summary(jobs)} on {', '.join(devices)}; traces go to {user.root}",
        markup=False,
        highlight=False,
        soft_wrap=True,
    )
    if not jobs:
        out.print(f"no job: no workload of these is in the {chosen_suite} suite (try --suite all)")
    summary = _run_with_progress(jobs, runner_executor, user, resume, out)
    if as_json:
        sys.stdout.write(
            json.dumps(
                {
                    "environments": summary.environments,
                    "traces": [t.to_json_dict() for t in summary.traces],
                    "skipped": [
                        {"solution": j.solution.name, "workload": j.workload.uuid, "reason": r}
                        for j, r in summary.skipped
                    ],
                    "resumed": summary.resumed,
                }
            )
            + "\n"
        )
    else:
        for environment in summary.environments:
            ceilings = environment.get("ceilings") or {}
            console.print(
                f"{environment['device']}: {environment['hardware']}; copy {ceilings.get('copy_gbps', 0):.0f} GB/s, "
                f"matmul {ceilings.get('matmul_tflops', 0):.1f} TFLOP/s"
            )
            if environment.get("startup"):
                console.print(f"  worker start-up {describe_startup(environment['startup'])}")
        run_tables(combined, summary.traces, summary.skipped, console)
        failure_details(summary.traces, console)
    counts = failed_statuses(summary)
    passed = sum(t.passed for t in summary.traces)
    out.print(
        f"{passed} passed, {len(summary.failures)} failed "
        f"({', '.join(f'{k.value} {v}' for k, v in counts.items()) or 'none'}), "
        f"{len(summary.skipped)} skipped, {summary.resumed} already done"
    )
    if summary.failures and not allow_failures:
        raise typer.Exit(1)


def _run_with_progress(
    jobs: list[Job], executor: Executor, user: TraceSet, resume: bool, out: Console
) -> RunSummary:
    """Run the jobs with a live progress line (plain lines when ``out`` is no terminal); the
    executor is closed either way."""
    from kernelarena.data import DatasetError
    from kernelarena.evaluate.runner import run_jobs
    from kernelarena.report.progress import RunProgress

    try:
        with RunProgress(jobs, out) as progress:
            return run_jobs(jobs, executor, user, resume=resume, on_progress=progress.on_progress)
    except (RuntimeError, DatasetError) as error:
        errors.print(f"[red]{error}[/red]")
        raise typer.Exit(1) from None
    finally:
        executor.close()


@dataclass(frozen=True)
class _Selection:
    """Which definitions a command is about, and for definitions the dataset adds workloads or
    solutions to without defining them, which jobs are its own."""

    names: list[str] | None
    own_jobs: dict[str, tuple[set[str], set[str]]]  # definition -> (solutions, workload uuids)

    def keeps(self, job: Job) -> bool:
        limit = self.own_jobs.get(job.definition.name)
        return limit is None or job.solution.name in limit[0] or job.workload.uuid in limit[1]


def _selection(
    user: TraceSet,
    names: list[str] | None,
    dataset: str | None,
    library: bool,
    command: str = "run",
    with_traces: bool = False,
) -> _Selection:
    """Names choose; without names, ``--dataset D`` means D's own definitions (those it defines,
    and those it holds workloads or solutions for: only those jobs; ``with_traces``: and those
    it holds traces of), and the built-in library joins only with ``--library``. Without
    either, everything (the library and the default dataset), as before."""
    if names or not dataset or library:
        return _Selection(names or None, {})
    own: dict[str, tuple[set[str], set[str]]] = {}
    if with_traces:
        for definition in user.traces:
            own.setdefault(definition, (set(), set()))
    for solution in user.solutions.values():
        if solution.definition not in user.definitions:
            own.setdefault(solution.definition, (set(), set()))[0].add(solution.name)
    for definition, workloads in user.workloads.items():
        if definition not in user.definitions and workloads:
            own.setdefault(definition, (set(), set()))[1].update(w.uuid for w in workloads)
    chosen = sorted(set(user.definitions) | set(own))
    if not chosen:
        raise ValueError(
            f"--dataset {dataset}: {user.root} holds no definitions, workloads or solutions; name "
            f"what to {command} (kernelarena {command} rmsnorm --dataset {dataset}) or add "
            "--library for the built-in library"
        )
    return _Selection(chosen, own)


def _import_user_modules(modules: list[str]) -> None:
    import importlib

    if modules and "" not in sys.path and "." not in sys.path:
        sys.path.insert(0, "")  # the current folder, as `python -m` would
    for module in modules:
        try:
            importlib.import_module(module.removesuffix(".py").replace("/", "."))
        except Exception as error:
            errors.print(f"[red]--import {module}: {type(error).__name__}: {error}[/red]")
            raise typer.Exit(2) from None


def _executor(kind: str, devices: list[str], timeouts: Timeouts) -> LocalExecutor:
    if kind == "local":
        return LocalExecutor(devices, timeouts)
    errors.print(f"[red]--executor: '{kind}' is not 'local' or 'ray'[/red]")
    raise typer.Exit(2)


def _ray_executor(
    address: str | None,
    device: str | None,
    timeouts: Timeouts,
    resources: str | None,
    accelerator: str | None,
    labels: list[str] | None,
    workers: int | None,
) -> RayExecutor:
    from kernelarena.evaluate.ray_executor import RayExecutor

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
    for label in labels or []:
        key, equals, value = label.partition("=")
        if not equals:
            raise ValueError(f"--ray-label: '{label}' is not KEY=VALUE")
        selector[key] = value
    return RayExecutor(
        address=address,
        timeouts=timeouts,
        device=device or "auto",
        resources=asked,
        accelerator_type=accelerator,
        label_selector=selector,
        workers=workers,
    )
