"""What every command shares: the typer apps, the consoles, the dataset options."""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING, Annotated, Optional

import typer
from rich.console import Console

if TYPE_CHECKING:
    from kernelarena.data import TraceSet

app = typer.Typer(
    add_completion=False,
    no_args_is_help=True,
    help="The kernelarena command: define operators, run and judge solutions, ship the fastest.",
)
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
