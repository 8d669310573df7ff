"""Help pages in the plain style of pytest, ruff and pip: ``-h``/``--help``, ``NAME`` and
``[NAMES]...`` in the usage line, ``--dataset PATH`` in the option list, no type tags.

Typer's own pages tag every option with its Python type (``<bool>``, ``<list[str]>``) and put
required arguments in braces; these classes lay the page out through click's plain formatter
instead, from the same parameters (``format_options`` and ``collect_usage_pieces`` are click's
documented hooks for that).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

import typer
from typer.core import TyperCommand, TyperGroup

CONTEXT = {"help_option_names": ["-h", "--help"]}
Command = TypeVar("Command", bound=Callable[..., Any])


def _argument_name(param: Any) -> str:
    name = param.metavar or param.name.upper()
    return f"{name}..." if param.nargs != 1 else name


def _usage_piece(param: Any) -> str:
    name = param.metavar or param.name.upper()
    if param.nargs != 1:
        return f"[{name}]..." if not param.required else f"{name}..."
    return name if param.required else f"[{name}]"


def _option_names(param: Any) -> str:
    names = sorted(param.opts, key=lambda o: (o.startswith("--"), o))
    shown = ", ".join(names)
    if param.secondary_opts:
        shown += " / " + ", ".join(param.secondary_opts)
    if not param.is_flag and not param.count:
        shown += " " + (param.metavar or param.name.upper())
    return shown


def _default(param: Any) -> str:
    default = param.default
    if callable(default) or default is None or default == () or default == []:
        return ""
    if param.is_flag:
        if param.secondary_opts and default:
            return f"[default: {param.opts[-1]}]"  # on unless turned off: say so
        return ""
    return f"[default: {default}]"


def _records(command: Any, ctx: Any) -> tuple[list[tuple[str, str]], list[tuple[str, str]]]:
    arguments, options = [], []
    for param in command.get_params(ctx):
        if getattr(param, "hidden", False):
            continue
        if param.param_type_name == "argument":
            arguments.append((_argument_name(param), getattr(param, "help", None) or ""))
        elif param.param_type_name == "option":
            text = " ".join(part for part in (param.help or "", _default(param)) if part)
            options.append((_option_names(param), text))
    return arguments, options


def _format_parameters(command: Any, ctx: Any, formatter: Any) -> None:
    arguments, options = _records(command, ctx)
    if arguments:
        with formatter.section("Arguments"):
            formatter.write_dl(arguments)
    if options:
        with formatter.section("Options"):
            formatter.write_dl(options)


class PlainCommand(TyperCommand):
    def collect_usage_pieces(self, ctx: Any) -> list[str]:
        pieces = [self.options_metavar] if self.options_metavar else []
        arguments = [p for p in self.get_params(ctx) if p.param_type_name == "argument"]
        return pieces + [_usage_piece(p) for p in arguments]

    def format_options(self, ctx: Any, formatter: Any) -> None:
        _format_parameters(self, ctx, formatter)


class PlainGroup(TyperGroup):
    def format_options(self, ctx: Any, formatter: Any) -> None:
        _format_parameters(self, ctx, formatter)
        self.format_commands(ctx, formatter)


class PlainTyper(typer.Typer):
    """A typer app whose pages, and whose commands' pages, are plain; ``-h`` is ``--help``."""

    def __init__(self, **settings: Any) -> None:
        settings.setdefault("cls", PlainGroup)
        settings.setdefault("context_settings", CONTEXT)
        super().__init__(add_completion=False, rich_markup_mode=None, **settings)

    def command(  # type: ignore[override]
        self, *args: Any, **settings: Any
    ) -> Callable[[Command], Command]:
        settings.setdefault("cls", PlainCommand)
        return super().command(*args, **settings)
