"""``kernelarena tune``: measure the library on this GPU within a budget (kernelarena.tune)."""

from __future__ import annotations

from typing import Annotated, Optional

import typer

from kernelarena.cli.common import DatasetOption, app, console, errors
from kernelarena.evaluate.executors.jobs import Timeouts


@app.command(short_help="Measure the library on this GPU within a time budget.")
def tune(
    names: Annotated[
        Optional[list[str]],
        typer.Argument(help="definitions, families or op_types (default: the whole library)"),
    ] = None,
    budget: Annotated[
        str,
        typer.Option("--budget", metavar="TIME", help="wall time to spend: 90s, 10m, 1.5h, 1h30m"),
    ] = "10m",
    device: Annotated[
        Optional[str],
        typer.Option(
            "--device", metavar="DEVICE", help="cuda (every GPU, the default) or cuda:0,..."
        ),
    ] = None,
    dataset: DatasetOption = None,
    trials: Annotated[
        int,
        typer.Option("--trials", metavar="N", help="checks with fresh random inputs per workload"),
    ] = 3,
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
