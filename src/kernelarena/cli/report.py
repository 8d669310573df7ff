"""``kernelarena report``: one self-contained HTML file of the traces."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer

from kernelarena.cli.common import (
    DatasetOption,
    ImportOption,
    LibraryOption,
    app,
    console,
    errors,
    load,
    select_or_exit,
)
from kernelarena.cli.selection import dataset_selection


@app.command(short_help="Write an HTML report of the traces.")
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
            "--hardware",
            metavar="MODEL",
            help="only traces of this hardware model, or part of its name: H100",
        ),
    ] = None,
    output: Annotated[
        Path, typer.Option("--output", "-o", metavar="FILE", help="the HTML file to write")
    ] = Path("report.html"),
    model_runs: Annotated[
        Optional[list[Path]],
        typer.Option(
            "--model-run",
            metavar="FILE",
            help="a model run's JSON (examples/llama_apply.py writes one): a page with its "
            "timings and apply's choices (repeatable)",
        ),
    ] = None,
    imports: ImportOption = None,
) -> None:
    """Write one self-contained HTML file of the traces (opens offline): per definition a
    leaderboard, latency against the shapes, the fraction of the ceiling, failures and where each
    trace came from; a summary that ranks the definitions; a hardware filter."""
    from kernelarena.report.html import build_report, write_report
    from kernelarena.report.html.model_run import load_model_run
    from kernelarena.report.html.views import hardware_models

    combined, user = load(dataset, imports)
    try:
        selection = dataset_selection(user, names, dataset, library, "report", with_traces=True)
        definitions = select_or_exit(combined, selection.names, dataset)
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
