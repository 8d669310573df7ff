"""Solutions written in a user's own module: ``kernelarena.register(definition, fn, name, language)``.

In the spirit of the seeds' ``BACKENDS.register``, but the function still runs only in a worker
process: the registered Solution's entry file is a small shim that imports the user's module there
(by module name, or by file for a script), and the function's own source is kept beside it so that
its content hash, and so every trace's provenance, follows the function's code.
"""

from __future__ import annotations

import inspect
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

from kernelarena.data import BuildSpec, Definition, Solution, SourceFile, TraceSet

_REGISTERED: dict[str, Solution] = {}

_SHIM = '''"""Registered with kernelarena.register: {module}.{qualname} ({file})."""
import importlib
import importlib.util

_MODULE = {module!r}
_FILE = {file!r}
_QUALNAME = {qualname!r}


def _load():
    if _MODULE != "__main__":
        try:
            return importlib.import_module(_MODULE)
        except ImportError:
            pass
    spec = importlib.util.spec_from_file_location("_kernelarena_registered_module", _FILE)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


_target = _load()
for _part in _QUALNAME.split("."):
    _target = getattr(_target, _part)
run = _target
'''


def register(
    definition: Definition | str,
    fn: Callable[..., Any],
    name: str,
    language: str = "python",
    *,
    description: str | None = None,
    destination_passing_style: bool = True,
    targets: tuple[str, ...] = ("cuda", "cpu"),
    author: str = "user",
) -> Solution:
    """Register ``fn`` as a solution of ``definition``; returns the Solution (also kept for runs)."""
    definition_name = definition if isinstance(definition, str) else definition.name
    if "<locals>" in fn.__qualname__ or fn.__name__ == "<lambda>":
        raise ValueError(
            f"register: '{fn.__qualname__}' must be a module-level function so a worker can import it"
        )
    file = inspect.getsourcefile(fn)
    if file is None:
        raise ValueError(f"register: cannot find the source file of '{fn.__qualname__}'")
    if fn.__module__ == "__main__" and not _guarded(file):
        raise ValueError(
            f"register: '{fn.__qualname__}' is defined in the script being run ({file}); a worker "
            "imports that file to find it, which would run the whole script again there. Move "
            "the function into a module of its own and import it (as my_kernels.py in the "
            "README), or put the script's own work under 'if __name__ == \"__main__\":'"
        )
    shim = _SHIM.format(module=fn.__module__, qualname=fn.__qualname__, file=file)
    solution = Solution(
        name=name,
        definition=definition_name,
        author=author,
        description=description,
        spec=BuildSpec(
            language=language,  # type: ignore[arg-type]
            target_hardware=list(targets),
            entry_point="registered.py::run",
            destination_passing_style=destination_passing_style,
        ),
        sources=[
            SourceFile(path="registered.py", content=shim),
            SourceFile(path="registered_function_source.py", content=inspect.getsource(fn)),
        ],
    )
    _REGISTERED[name] = solution
    return solution


def _guarded(file: str) -> bool:
    """Whether a script keeps its own work under ``if __name__ == "__main__":``."""
    try:
        source = Path(file).read_text(encoding="utf-8")
    except OSError:
        return False
    return re.search(r"""__name__\s*==\s*["']__main__["']""", source) is not None


def registered_solutions() -> list[Solution]:
    return list(_REGISTERED.values())


def add_registered(trace_set: TraceSet) -> None:
    """Add the registered solutions whose definition is in ``trace_set`` (in memory only)."""
    for solution in _REGISTERED.values():
        if (
            solution.definition in trace_set.definitions
            and solution.name not in trace_set.solutions
        ):
            trace_set.add_solution(solution, persist=False)
