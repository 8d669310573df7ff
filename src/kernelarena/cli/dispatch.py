"""Dispatch tables and ahead-of-time builds (kernelarena.dispatch): ``dispatch show``, ``build``."""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated, Optional

import typer

from kernelarena.cli.common import (
    DatasetOption,
    ImportOption,
    app,
    console,
    dispatch_app,
    load,
    select_or_exit,
)

if TYPE_CHECKING:
    from kernelarena.dispatch.aot import Built


@dispatch_app.command("show", short_help="Print the apply table of a definition.")
def dispatch_show(
    name: Annotated[str, typer.Argument(help="a definition, family or op_type")],
    hardware: Annotated[
        Optional[str],
        typer.Option(
            "--hardware",
            metavar="MODEL",
            help="hardware model (default: every model with traces, and this GPU)",
        ),
    ] = None,
    dataset: DatasetOption = None,
    imports: ImportOption = None,
) -> None:
    """Print the apply table: per shape key the winner, its eager and GPU times, the margin, how it
    won, the winner inside CUDA graph capture, and whose traces decide (own or borrowed)."""
    import torch

    from kernelarena.dispatch.aot import measured_hardware, tables_for
    from kernelarena.report.dispatch import table_view
    from kernelarena.runtime.hardware import hardware_name

    combined, _ = load(dataset, imports)
    definitions = select_or_exit(combined, [name], dataset)
    device = "cuda:0" if torch.cuda.is_available() else "cpu"
    here = hardware_name(torch.device(device))
    for definition in sorted(definitions, key=lambda d: d.name):
        models = [hardware] if hardware else measured_hardware(combined, definition)
        if not hardware and (device != "cpu" or not models) and here not in models:
            models.append(here)  # this GPU, measured or not: what apply does here
        for model in models:
            console.print(table_view(*tables_for(combined, definition, model, device)))


@app.command("build", short_help="Build solutions into the build cache ahead of time.")
def build_command(
    names: Annotated[
        Optional[list[str]], typer.Argument(help="definitions, families or op_types (default: all)")
    ] = None,
    winners: Annotated[
        bool, typer.Option("--winners", help="only the solutions apply tables can choose")
    ] = False,
    hardware: Annotated[
        Optional[list[str]],
        typer.Option(
            "--hardware",
            metavar="MODEL",
            help="hardware model(s) whose winners to build (default: this GPU, else all)",
        ),
    ] = None,
    warm: Annotated[
        bool,
        typer.Option("--warm", help="with a GPU: call each winner once to fill the JIT caches"),
    ] = True,
    retry_failed: Annotated[
        bool,
        typer.Option(
            "--retry-failed", help="build again what failed before (its error is kept otherwise)"
        ),
    ] = False,
    dataset: DatasetOption = None,
    imports: ImportOption = None,
) -> None:
    """Build solutions into the build cache ahead of time (CUDA compiles for sm_90a without a GPU).

    CUDA and C++ solutions are compiled in parallel, each in a confined process; a build that
    fails is reported with the compiler's first error and kept: the next run reports it again
    without compiling, until its sources, flags or toolchain change (or --retry-failed)."""
    import os

    from kernelarena.dispatch.aot import build_winners
    from kernelarena.evaluate.executors.build_pool import pool_outcomes
    from kernelarena.evaluate.sandbox.confined_build import build_in_sandbox

    if retry_failed:  # read by every build, the confined ones included
        os.environ["KERNELARENA_RETRY_FAILED_BUILDS"] = "1"
    combined, _ = load(dataset, imports)
    definitions = select_or_exit(combined, names, dataset)
    results = build_winners(
        combined,
        definitions,
        hardware,
        only_winners=winners,
        warm=warm,
        confined=build_in_sandbox,
        pool=lambda pairs, device: pool_outcomes(pairs, device, namespaced=False),
    )
    if not _print_builds(results):
        raise typer.Exit(1)


def _print_builds(results: list[Built]) -> bool:
    """The builds as a table, each failure's error in full, and the counts; whether none failed."""
    from rich.table import Table

    view = Table(title="ahead-of-time builds")
    for column in ("definition", "solution", "hardware", "status", "detail"):
        view.add_column(column)
    for built in results:
        solution = built.solution.removeprefix(built.definition + "_")
        view.add_row(built.definition, solution, built.hardware, built.status, built.detail)
    console.print(view)
    failed = [b for b in results if b.status == "failed"]
    for solution, detail in dict.fromkeys((b.solution, b.detail) for b in failed):
        # In full, once per solution: the table may fold a long line.
        console.print(f"failed: {solution}: {detail}", markup=False, soft_wrap=True)
    console.print(
        f"{len(results) - len(failed)} built or skipped, {len(failed)} failed"
        + ("" if results else " (no traces: nothing has won yet; run 'kernelarena run' first)")
    )
    return not failed
