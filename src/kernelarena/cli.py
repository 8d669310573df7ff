"""The ``kernelarena`` command: thin, it calls the stages (data, evaluate, dispatch, report).

The stages are imported inside the commands: ``run`` starts its workers (seconds to import torch)
before this process builds the schemas (kernelarena.data, 0.25 s) and loads the datasets.
"""

from __future__ import annotations

from kernelarena.evaluate.bytecode import keep_bytecode_here

keep_bytecode_here()  # before the imports below, which it speeds up where no bytecode is kept

import json  # noqa: E402
import sys  # noqa: E402
from dataclasses import dataclass  # noqa: E402
from pathlib import Path  # noqa: E402
from typing import TYPE_CHECKING, Annotated, Optional  # noqa: E402

import typer  # noqa: E402
from rich.console import Console  # noqa: E402

from kernelarena.evaluate.jobs import Job, Timeouts  # noqa: E402
from kernelarena.evaluate.local import LocalExecutor  # noqa: E402
from kernelarena.evaluate.worker import describe_startup  # noqa: E402

if TYPE_CHECKING:
    from kernelarena.data import TraceSet
    from kernelarena.evaluate.ray_executor import RayExecutor
    from kernelarena.evaluate.runner import Executor, RunSummary

app = typer.Typer(add_completion=False, no_args_is_help=True, help=__doc__)
dispatch_app = typer.Typer(
    add_completion=False, no_args_is_help=True, help="Dispatch tables built from traces."
)
app.add_typer(dispatch_app, name="dispatch")
# Wide tables when piped (CI logs, files); the terminal's own width otherwise.
console = Console(width=None if sys.stdout.isatty() else 160)
errors = Console(stderr=True, width=None if sys.stderr.isatty() else 160)

DatasetOption = Annotated[
    Optional[str],
    typer.Option(
        "--dataset",
        help="dataset folder (default: $KERNELARENA_DATASET or ~/.local/share/kernelarena/dataset)",
    ),
]

LibraryOption = Annotated[
    bool,
    typer.Option(
        "--library",
        help="with --dataset and no names: the built-in library's definitions too "
        "(otherwise only the dataset's own)",
    ),
]


def _split(values: list[str] | None) -> list[str] | None:
    if not values:
        return None
    return [part for value in values for part in value.split(",") if part]


def _warn_problems(trace_set: TraceSet) -> None:
    if trace_set.problems:
        errors.print(
            f"[yellow]{len(trace_set.problems)} problem(s) in the dataset were skipped; "
            "run 'kernelarena validate' for the list[/yellow]"
        )


@app.command("list")
def list_definitions(dataset: DatasetOption = None) -> None:
    """List the definitions with their axes, solutions, workloads and traces."""
    from kernelarena.datasets import load_default
    from kernelarena.report.console import definitions_table

    combined, _ = load_default(dataset)
    _warn_problems(combined)
    console.print(definitions_table(combined))


@app.command()
def show(name: str, dataset: DatasetOption = None) -> None:
    """Show one definition: its schema, solutions, workloads and the latest results."""
    from kernelarena.datasets import load_default

    combined, _ = load_default(dataset)
    definition = combined.definitions.get(name)
    if definition is None:
        from kernelarena.evaluate.runner import PlanError, select_definitions

        try:
            family = select_definitions(combined, [name])
        except PlanError as error:
            errors.print(f"[red]{error}[/red]")
            raise typer.Exit(2) from None
        console.print(
            f"'{name}' names {len(family)} definitions: {', '.join(sorted(d.name for d in family))}"
        )
        return
    payload = definition.to_json_dict()
    payload["reference"] = f"<{len(definition.reference.splitlines())} lines>"
    console.print_json(json.dumps(payload))
    console.print("[bold]solutions[/bold]")
    for solution in combined.solutions_for(name):
        console.print(
            f"  {solution.name}  [{solution.spec.language.value}] {solution.spec.entry_point}  "
            f"targets={solution.spec.target_hardware}  {solution.description or ''}"
        )
    console.print(f"[bold]workloads[/bold] ({len(combined.workloads.get(name, []))})")
    from kernelarena.report.console import workload_label

    for workload in combined.workloads.get(name, []):
        console.print(
            f"  {workload.uuid[:8]}  {workload_label(workload)}  tags={workload.tags or []}"
        )
    traces = combined.traces.get(name, [])
    console.print(f"[bold]traces[/bold]: {len(traces)} ({sum(t.passed for t in traces)} passed)")


@app.command()
def validate(
    path: Annotated[
        Optional[Path],
        typer.Argument(help="dataset folder (default: the built-in library and the user dataset)"),
    ] = None,
) -> None:
    """Check a dataset folder: every problem with its file and field; exit 1 if there is any."""
    from kernelarena.data import TraceSet
    from kernelarena.datasets import load_default, user_dataset_root

    if path is not None:
        trace_set = TraceSet.load(path)
        label = str(path)
    else:
        trace_set, _ = load_default(None)
        label = f"built-in library + {user_dataset_root()}"
    for problem in trace_set.problems:
        console.print(str(problem), markup=False, highlight=False, soft_wrap=True)
    counts = (
        len(trace_set.definitions),
        len(trace_set.solutions),
        sum(len(w) for w in trace_set.workloads.values()),
        sum(len(t) for t in trace_set.traces.values()),
    )
    skipped = (
        f" ({len(trace_set.unavailable)} without their blobs)" if trace_set.unavailable else ""
    )
    summary = (
        f"{label}: {counts[0]} definitions, {counts[1]} solutions, {counts[2]} workloads{skipped}, "
        f"{counts[3]} traces; {len(trace_set.problems)} problem(s)"
    )
    # soft_wrap: a line a script greps stays one line, however narrow the terminal.
    console.print(summary, markup=False, highlight=False, soft_wrap=True)
    if trace_set.problems:
        raise typer.Exit(1)


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


@app.command()
def export(path: Path, dataset: DatasetOption = None) -> None:
    """Write the built-in library (and the user dataset) as a FlashInfer-Trace dataset folder."""
    from kernelarena.datasets import load_default

    combined, _ = load_default(dataset)
    try:
        combined.save(path)
    except FileExistsError as error:
        errors.print(f"[red]{error}[/red]")
        raise typer.Exit(1) from None
    console.print(
        f"wrote {len(combined.definitions)} definitions and {len(combined.solutions)} solutions to {path}"
    )


@app.command()
def report(
    names: Annotated[
        Optional[list[str]],
        typer.Argument(
            help="definitions, families or op_types (default: those of --dataset; without "
            "--dataset, every one with traces)"
        ),
    ] = None,
    dataset: DatasetOption = None,
    library: LibraryOption = False,
    hardware: Annotated[
        Optional[list[str]],
        typer.Option(
            "--hardware", help="only traces of this hardware model, or part of its name: H100"
        ),
    ] = None,
    output: Annotated[Path, typer.Option("--output", "-o", help="the HTML file to write")] = Path(
        "report.html"
    ),
    model_runs: Annotated[
        Optional[list[Path]],
        typer.Option(
            "--model-run",
            help="a model run's JSON (examples/llama_apply.py writes one): a page with its "
            "timings and apply's choices (repeatable)",
        ),
    ] = None,
) -> None:
    """Write one self-contained HTML file of the traces (opens offline): per definition a
    leaderboard, latency against the shapes, the fraction of the ceiling, failures and where each
    trace came from; a summary that ranks the definitions; a hardware filter."""
    from kernelarena.datasets import load_default
    from kernelarena.evaluate.runner import select_definitions
    from kernelarena.report.html import build_report, write_report
    from kernelarena.report.html.model_run import load_model_run
    from kernelarena.report.html.views import hardware_models

    combined, user = load_default(dataset)
    _warn_problems(combined)
    try:
        selection = _selection(user, names, dataset, library, "report", with_traces=True)
        definitions = select_definitions(combined, selection.names)
        models = hardware_models(combined, hardware)
        runs = [load_model_run(path) for path in model_runs or []]
    except ValueError as error:  # PlanError, ModelRunError, an unknown hardware model
        errors.print(str(error), markup=False, highlight=False, soft_wrap=True)
        raise typer.Exit(2) from None
    built = build_report(combined, definitions, hardware=models, model_runs=runs)
    if not built.definitions and not runs:
        where = f" on {', '.join(models)}" if models else ""
        errors.print(
            f"no traces of {', '.join(names or [d.name for d in definitions][:5])}{where}: "
            "run 'kernelarena run NAMES' first",
            markup=False,
            highlight=False,
        )
        raise typer.Exit(1)
    size = write_report(output, built)
    console.print(
        f"wrote {output} ({size / 1e6:.1f} MB): {len(built.definitions)} definitions, "
        f"{len(built.hardware)} hardware model(s), {built.traces} traces, {built.figures} plots",
        markup=False,
        highlight=False,
        soft_wrap=True,
    )


# -- dispatch tables and ahead-of-time builds (kernelarena.dispatch) -------------------------------


@dispatch_app.command("show")
def dispatch_show(
    name: Annotated[str, typer.Argument(help="a definition, family or op_type")],
    hardware: Annotated[
        Optional[str],
        typer.Option(help="hardware model (default: every model with traces, and this GPU)"),
    ] = None,
    dataset: DatasetOption = None,
) -> None:
    """Print the apply table: per shape key the winner, its eager and GPU times, the margin, how it
    won, the winner inside CUDA graph capture, and whose traces decide (own or borrowed)."""
    import torch

    from kernelarena.datasets import load_default
    from kernelarena.dispatch.aot import measured_hardware, tables_for
    from kernelarena.evaluate.environment import hardware_name
    from kernelarena.evaluate.runner import PlanError, select_definitions
    from kernelarena.report.dispatch import table_view

    combined, _ = load_default(dataset)
    try:
        definitions = select_definitions(combined, [name])
    except PlanError as error:
        errors.print(f"[red]{error}[/red]")
        raise typer.Exit(2) from None
    device = "cuda:0" if torch.cuda.is_available() else "cpu"
    here = hardware_name(torch.device(device))
    for definition in sorted(definitions, key=lambda d: d.name):
        models = [hardware] if hardware else measured_hardware(combined, definition)
        if not hardware and (device != "cpu" or not models) and here not in models:
            models.append(here)  # this GPU, measured or not: what apply does here
        for model in models:
            console.print(table_view(*tables_for(combined, definition, model, device)))


@app.command("build")
def build_command(
    names: Annotated[
        Optional[list[str]], typer.Argument(help="definitions, families or op_types (default: all)")
    ] = None,
    winners: Annotated[
        bool, typer.Option("--winners", help="only the solutions apply tables can choose")
    ] = False,
    hardware: Annotated[
        Optional[list[str]],
        typer.Option(help="hardware model(s) whose winners to build (default: this GPU, else all)"),
    ] = None,
    warm: Annotated[
        bool, typer.Option(help="with a GPU: call each winner once to fill the JIT caches")
    ] = True,
    dataset: DatasetOption = None,
) -> None:
    """Build solutions into the build cache ahead of time (CUDA compiles for sm_90a without a GPU)."""
    from rich.table import Table

    from kernelarena.datasets import load_default
    from kernelarena.dispatch.aot import build_winners
    from kernelarena.evaluate.runner import PlanError, select_definitions

    combined, _ = load_default(dataset)
    try:
        definitions = select_definitions(combined, names)
    except PlanError as error:
        errors.print(f"[red]{error}[/red]")
        raise typer.Exit(2) from None
    results = build_winners(combined, definitions, hardware, only_winners=winners, warm=warm)
    view = Table(title="ahead-of-time builds")
    for column in ("definition", "solution", "hardware", "status", "detail"):
        view.add_column(column)
    for built in results:
        solution = built.solution.removeprefix(built.definition + "_")
        view.add_row(built.definition, solution, built.hardware, built.status, built.detail)
    console.print(view)
    failed = [b for b in results if b.status == "failed"]
    console.print(
        f"{len(results) - len(failed)} built or skipped, {len(failed)} failed"
        + ("" if results else " (no traces: nothing has won yet; run 'kernelarena run' first)")
    )
    if failed:
        raise typer.Exit(1)


# -- measuring the library on this GPU (kernelarena.tune) ------------------------------------------


@app.command()
def tune(
    names: Annotated[
        Optional[list[str]],
        typer.Argument(help="definitions, families or op_types (default: the whole library)"),
    ] = None,
    budget: Annotated[str, typer.Option(help="wall time to spend: 90s, 10m, 1.5h, 1h30m")] = "10m",
    device: Annotated[
        Optional[str], typer.Option("--device", help="cuda (every GPU, the default) or cuda:0,...")
    ] = None,
    dataset: DatasetOption = None,
    trials: Annotated[int, typer.Option(help="checks with fresh random inputs per workload")] = 3,
) -> None:
    """Measure the library (or NAMES) on this machine's GPU within --budget, into your dataset:
    apply and 'dispatch show' use these traces from then on. Run it again to go on where it stopped."""
    import time

    from kernelarena import tune as tuning
    from kernelarena.evaluate.options import Options

    started = time.monotonic()
    try:
        budget_s = tuning.parse_budget(budget)
        devices = tuning.gpu_devices(device)
    except ValueError as error:
        errors.print(f"[red]{error}[/red]")
        raise typer.Exit(2) from None
    inner = tuning.local_executor(devices, Timeouts())
    executor = tuning.BudgetedExecutor(inner, budget_s, started=started)
    try:
        from kernelarena.datasets import load_default

        combined, user = load_default(dataset)
        jobs = tuning.tune_plan(combined, names, Options(trials=trials))
    except ValueError as error:  # PlanError: names that match nothing
        executor.close()
        errors.print(f"[red]{error}[/red]")
        raise typer.Exit(2) from None
    count = len({job.definition.name for job in jobs})
    console.print(
        f"{len(jobs)} jobs of {count} definitions on {', '.join(devices)} within {budget}; "
        f"traces go to {user.root}"
    )
    try:
        summary = tuning.run_with_progress(jobs, executor, user, console)
    finally:
        executor.close()
    for line in tuning.summary_lines(summary):
        console.print(line, markup=False, highlight=False)


def main() -> None:
    app()


if __name__ == "__main__":
    main()
