"""Commands over datasets: list, show, validate, export."""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Optional

import typer

from kernelarena.cli.common import (
    DatasetOption,
    ImportOption,
    LibraryOption,
    app,
    console,
    errors,
    load,
    say,
    select_or_exit,
)

if TYPE_CHECKING:
    from kernelarena.data import TraceSet


NameArgument = Annotated[str, typer.Argument(help="a definition, family or op_type")]


@app.command("list")
def list_definitions(
    dataset: DatasetOption = None, library: LibraryOption = False, imports: ImportOption = None
) -> None:
    """List definitions: axes, signature, solutions, workloads, traces.

    The dataset's own definitions come first, in a table of their own; the built-in library's
    follow (with --dataset, only when --library is given)."""
    from kernelarena.datasets import user_dataset_root
    from kernelarena.report.console import definitions_table

    combined, user = load(dataset, imports)
    own = sorted(set(user.definitions) & set(combined.definitions))
    built_in = sorted(set(combined.definitions) - set(own))
    root = user_dataset_root(dataset)
    if own:
        say(console, f"definitions in {root} ({len(own)}):")
        console.print(definitions_table(combined, own, width=console.width))
    elif dataset:
        say(console, f"no definitions in {root}")
    if dataset and not library:
        say(console, f"and {len(built_in)} built-in definitions ('--library' lists them too)")
    else:
        say(console, f"built-in definitions ({len(built_in)}):")
        console.print(definitions_table(combined, built_in, width=console.width))


@app.command(short_help="Show a definition: schema, solutions, workloads, traces.")
def show(name: NameArgument, dataset: DatasetOption = None, imports: ImportOption = None) -> None:
    """Show one definition: its schema, solutions, workloads and traces."""
    combined, _ = load(dataset, imports)
    definition = combined.definitions.get(name)
    if definition is None:
        family = select_or_exit(combined, [name], dataset)
        names = ", ".join(sorted(d.name for d in family))
        say(console, f"'{name}' names {len(family)} definitions: {names}")
        return
    payload = definition.to_json_dict()
    payload["reference"] = f"<{len(definition.reference.splitlines())} lines>"
    console.print_json(json.dumps(payload))
    _show_solutions(combined, name, imports)
    from kernelarena.report.console import workload_label

    workloads = combined.workloads.get(name, [])
    console.print(f"[bold]workloads[/bold] ({len(workloads)})")
    for workload in workloads:
        tags = ", ".join(workload.tags or []) or "none (in every suite)"
        say(console, f"  {workload.uuid[:8]}  {workload_label(workload)}  tags: {tags}")
    traces = combined.traces.get(name, [])
    say(console, f"traces: {len(traces)} ({sum(t.passed for t in traces)} passed)")


def _show_solutions(combined: TraceSet, name: str, imports: list[str] | None) -> None:
    """Each solution with its language and targets, and why it cannot run here when so."""
    from kernelarena.evaluate.executors.devices import visible_gpu_count
    from kernelarena.evaluate.executors.runner import left_out_here

    solutions = combined.solutions_for(name)
    console.print(f"[bold]solutions[/bold] ({len(solutions)})")
    on_gpu = visible_gpu_count() > 0
    for solution in solutions:
        spec = solution.spec
        line = f"  {solution.name}  [{spec.language.value}] {spec.entry_point}"
        line += f"  targets: {', '.join(spec.target_hardware) or 'none'}"
        why = left_out_here(solution, on_gpu)
        if why:
            line += f"  (skipped here: {why})"
        elif not on_gpu and not solution.runs_on("cpu"):
            line += "  (built here, not run: no GPU)"
        say(console, line + (f"  {solution.description}" if solution.description else ""))
    if not solutions:
        hint = "" if imports else " (solutions registered from Python: add --import MODULE)"
        say(console, f"  none{hint}")


@app.command(short_help="Check a dataset folder; exit 1 on any problem.")
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


@app.command(short_help="Write the library and your dataset as one dataset folder.")
def export(
    path: Annotated[Path, typer.Argument(help="a new folder to write the dataset to")],
    dataset: DatasetOption = None,
    imports: ImportOption = None,
) -> None:
    """Write the built-in library and your dataset as one FlashInfer-Trace dataset folder.

    Solutions in languages FlashInfer-Bench does not read (``cute_dsl``) are left out, with their
    traces, and named in a warning."""
    combined, _ = load(dataset, imports)
    combined, left_out = combined.for_flashinfer()
    for solution in left_out:
        errors.print(
            f"warning: left out {solution.name}: language '{solution.spec.language.value}' is "
            "kernelarena's own (FlashInfer-Bench's reader rejects it)",
            style="yellow",
            markup=False,
            highlight=False,
            soft_wrap=True,
        )
    try:
        combined.save(path)
    except FileExistsError as error:
        errors.print(str(error), style="red", markup=False, highlight=False, soft_wrap=True)
        raise typer.Exit(1) from None
    say(
        console,
        f"wrote {len(combined.definitions)} definitions and {len(combined.solutions)} solutions "
        f"to {path}",
    )
