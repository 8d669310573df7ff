"""What every command shares: the typer apps, the consoles, the dataset options."""

from __future__ import annotations

import difflib
import importlib
import os
import shlex
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, NoReturn, Optional

import typer
from rich.console import Console

from kernelarena.cli.help import PlainTyper

if TYPE_CHECKING:
    from kernelarena.data import Definition, TraceSet

app = PlainTyper(
    no_args_is_help=True,
    help="The kernelarena command: define operators, run and judge solutions, ship the fastest.",
)
dispatch_app = PlainTyper(no_args_is_help=True, help="Dispatch tables built from traces.")
app.add_typer(dispatch_app, name="dispatch")


def _print_version(asked: bool) -> None:
    if asked:
        from kernelarena import __version__

        print(f"kernelarena {__version__}")
        raise typer.Exit()


@app.callback()
def _options(
    version: Annotated[
        bool,
        typer.Option(
            "--version", help="print the version and exit", callback=_print_version, is_eager=True
        ),
    ] = False,
) -> None:
    """The kernelarena command: define operators, run and judge solutions, ship the fastest."""


# The terminal's width; when piped (CI logs, files), $COLUMNS if set, else wide tables.
_PIPED_WIDTH = None if "COLUMNS" in os.environ else 160
console = Console(width=None if sys.stdout.isatty() else _PIPED_WIDTH)
errors = Console(stderr=True, width=None if sys.stderr.isatty() else _PIPED_WIDTH)

DatasetOption = Annotated[
    Optional[str],
    typer.Option(
        "--dataset",
        metavar="PATH",
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

ImportOption = Annotated[
    Optional[list[str]],
    typer.Option(
        "--import",
        metavar="MODULE",
        help="a module of yours that calls kernelarena.register (repeatable); it is imported "
        "here to learn its solutions, which still run only in the workers",
    ),
]


def fail(message: str, code: int = 2) -> NoReturn:
    """Say what is wrong on stderr, as written (no rich markup), and exit."""
    errors.print(message, style="red", markup=False, highlight=False, soft_wrap=True)
    raise typer.Exit(code)


def say(out: Console, message: str, style: str | None = None) -> None:
    """A line as written: no rich markup (``[python]`` stays), no highlighting."""
    out.print(message, style=style, markup=False, highlight=False, soft_wrap=True)


def check_dataset_folder(dataset: str | None) -> None:
    """An explicit --dataset must be a folder: a typo is an error, not an empty dataset."""
    if dataset is None or Path(dataset).is_dir():
        return
    if Path(dataset).exists():
        fail(f"--dataset {dataset}: not a folder")
    fail(
        f"--dataset {dataset}: no such folder (to start a new dataset there, create it first: "
        f"mkdir -p {shlex.quote(dataset)})"
    )


def load(dataset: str | None, imports: list[str] | None = None) -> tuple[TraceSet, TraceSet]:
    """(the built-in library with the user's dataset, the user's dataset), with the solutions
    ``--import`` registers; the dataset's problems are reported on stderr."""
    check_dataset_folder(dataset)
    import_user_modules(imports or [])
    from kernelarena.datasets import load_default

    combined, user = load_default(dataset)
    _warn_problems(combined, dataset)
    return combined, user


def _split(values: list[str] | None) -> list[str] | None:
    if not values:
        return None
    return [part for value in values for part in value.split(",") if part]


def validate_command(dataset: str | None) -> str:
    return "kernelarena validate" + (f" {shlex.quote(dataset)}" if dataset else "")


def _warn_problems(trace_set: TraceSet, dataset: str | None = None, shown: int = 3) -> None:
    """The first problems themselves, and the command that lists them all."""
    problems = trace_set.problems
    if not problems:
        return
    say(
        errors, f"{len(problems)} problem(s) in the dataset; what they name was left out:", "yellow"
    )
    for problem in problems[:shown]:
        say(errors, f"  {problem}", "yellow")
    more = f"the other {len(problems) - shown}" if len(problems) > shown else "them"
    say(errors, f"  ('{validate_command(dataset)}' lists {more})", "yellow")


def select_or_exit(
    trace_set: TraceSet, names: list[str] | None, dataset: str | None
) -> list[Definition]:
    """The definitions ``names`` choose; a name that matches nothing is an error that says why."""
    from kernelarena.runtime.names import UnknownNames, definitions_named

    try:
        return definitions_named(trace_set, names)
    except UnknownNames as error:
        fail(unknown_name(trace_set, error.names[0], dataset))


def unknown_name(trace_set: TraceSet, name: str, dataset: str | None) -> str:
    """Why ``name`` matches nothing: its file did not load, a near miss, or not there at all."""
    broken = [p for p in trace_set.problems if Path(p.file.split(":")[0]).stem == name]
    if broken:
        return (
            f"'{name}' did not load: {broken[0]} ('{validate_command(dataset)}' lists every "
            "problem)"
        )
    known = {d.name for d in trace_set.definitions.values()}
    known |= {d.op_type for d in trace_set.definitions.values()}
    known |= {
        t.removeprefix("family:")
        for d in trace_set.definitions.values()
        for t in d.tags
        if t.startswith("family:")
    }
    near = difflib.get_close_matches(name, sorted(known), n=3)
    where = f"the built-in library or {dataset}" if dataset else "the built-in library"
    listing = "kernelarena list" + (f" --dataset {shlex.quote(dataset)}" if dataset else "")
    hint = f"did you mean {' or '.join(near)}? " if near else ""
    return (
        f"'{name}' matches no definition, family or op_type of {where}; {hint}"
        f"('{listing}' lists them)"
    )


def import_user_modules(modules: list[str]) -> None:
    if modules and "" not in sys.path and "." not in sys.path:
        sys.path.insert(0, "")  # the current folder, as `python -m` would
    for module in modules:
        try:
            importlib.import_module(module.removesuffix(".py").replace("/", "."))
        except Exception as error:
            fail(f"--import {module}: {type(error).__name__}: {error}")
