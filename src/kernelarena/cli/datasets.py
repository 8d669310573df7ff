"""Commands over datasets: list, show, validate, export."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated, Optional

import typer

from kernelarena.cli.common import DatasetOption, _warn_problems, app, console, errors


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
