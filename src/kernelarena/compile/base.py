"""Builder protocol, the Runnable it returns, and the signature check done at build time."""

from __future__ import annotations

import inspect
import os
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

from kernelarena.data import Definition, Language, Solution


class BuildError(Exception):
    """The solution cannot be turned into a callable: compile error, import error, bad signature."""


class DependencyMissing(BuildError):
    """An optional dependency (a peer's package, a GPU) is not here: the solution is skipped."""


class CachedBuildError(BuildError):
    """A build that failed before with the same key (sources, flags, architecture, toolchain):
    its error, read from the build cache, not compiled again (``cache.cached_build``)."""


# A compiler's diagnostic with its place: nvcc's 'kernel.cu(12): error: ...', gcc's and clang's
# 'main.cpp:3:10: fatal error: ...'.
_LOCATED_ERROR = re.compile(
    r"^(?P<path>\S+?)(?P<place>\(\d+\)|:\d+(?::\d+)?):\s*(?:fatal )?error\b"
)
# Without a place: the linker's and nvcc's own.
_BARE_ERROR = re.compile(
    r"\b(?:error|fatal)\b\s*:|undefined reference|cannot find -l", re.IGNORECASE
)


def first_error(log: str) -> str:
    """The compiler's first error in a build's log, its path shortened to the file's name (the
    build folder's path says nothing); else the first line that reads as an error; else the
    log's first line."""
    lines = [line.strip() for line in log.splitlines() if line.strip()]
    for line in lines:
        found = _LOCATED_ERROR.match(line)
        if found:
            return os.path.basename(found["path"]) + line[found.end("path") :]
    for line in lines:
        if _BARE_ERROR.search(line) and not line.startswith(("ninja:", "FAILED:")):
            return line
    return lines[0] if lines else ""


@dataclass
class Runnable:
    """A built solution. ``call(args)`` takes inputs then (in DPS) non-aliased outputs."""

    definition: Definition
    solution: Solution
    fn: Callable[..., Any]
    destination_passing_style: bool
    artifact: str | None = None
    metadata: dict[str, Any] = field(default_factory=dict)
    adapt: Callable[[tuple[Any, ...]], tuple[Any, ...]] | None = None

    def __call__(self, *args: Any) -> Any:
        if self.adapt is not None:
            args = self.adapt(args)
        return self.fn(*args)


class Builder(Protocol):
    languages: tuple[Language, ...]

    def build(self, definition: Definition, solution: Solution, device: str) -> Runnable: ...


def argument_names(definition: Definition, destination_passing_style: bool) -> list[str]:
    names = list(definition.inputs)
    if destination_passing_style:
        names += [n for n, spec in definition.outputs.items() if spec.aliases is None]
    return names


def check_signature(fn: Callable[..., Any], definition: Definition, solution: Solution) -> None:
    """The entry point must accept the definition's arguments positionally, in order."""
    try:
        signature = inspect.signature(fn)
    except (TypeError, ValueError):
        return  # compiled functions (tvm-ffi) carry no Python signature
    expected = argument_names(definition, solution.spec.destination_passing_style)
    try:
        signature.bind(*expected)
    except TypeError as error:
        style = (
            "inputs then outputs (destination-passing style)"
            if solution.spec.destination_passing_style
            else "inputs"
        )
        raise BuildError(
            f"signature: {solution.spec.entry_point}{signature} does not accept the "
            f"{len(expected)} arguments ({', '.join(expected)}): {style}; {error}"
        ) from None
