"""Python and Triton solutions: sources written to the cache, imported as a private package.

The sources are never put on ``sys.path`` (a solution folder named ``triton`` would shadow the real
package); the entry file is imported as a member of a package made for this solution, so relative
imports between its files work.
"""

from __future__ import annotations

import importlib.util
import sys
import types
from pathlib import Path

from kernelarena.compile.base import BuildError, DependencyMissing, Runnable, check_signature
from kernelarena.compile.cache import cache_key, cached_build, write_sources
from kernelarena.data import Definition, Language, Solution

# Dependencies that name a distribution whose import name differs.
_IMPORT_NAMES = {
    "liger-kernel": "liger_kernel",
    "apache-tvm-ffi": "tvm_ffi",
    "flash-attn": "flash_attn",
    "flashinfer-python": "flashinfer",
}


def check_python_dependencies(solution: Solution) -> None:
    for dependency in solution.spec.dependencies:
        name = _IMPORT_NAMES.get(dependency, dependency.replace("-", "_"))
        if importlib.util.find_spec(name.split(".")[0]) is None:
            raise DependencyMissing(f"dependency '{dependency}' is not installed")


class PythonBuilder:
    languages: tuple[Language, ...] = (Language.PYTHON, Language.TRITON)

    def build(self, definition: Definition, solution: Solution, device: str) -> Runnable:
        check_python_dependencies(solution)
        sources = [(s.path, s.content) for s in solution.sources]
        key = cache_key(kind="python", sources=sources)
        entry = cached_build(
            "python", key, solution.spec.entry_file, lambda folder: write_sources(folder, sources)
        )
        package = f"_kernelarena_solution_{key}"
        module_name = package + "." + solution.spec.entry_file.removesuffix(".py").replace("/", ".")
        fn = getattr(_import(package, module_name, entry), solution.spec.entry_symbol, None)
        if not callable(fn):
            raise BuildError(
                f"spec.entry_point: '{solution.spec.entry_symbol}' is not a function in {solution.spec.entry_file}"
            )
        check_signature(fn, definition, solution)
        return Runnable(
            definition, solution, fn, solution.spec.destination_passing_style, artifact=str(entry)
        )


def _import(package: str, module_name: str, entry: Path) -> types.ModuleType:
    if module_name in sys.modules:
        return sys.modules[module_name]
    root = entry.parent
    for _ in range(module_name.count(".") - 1):
        root = root.parent
    if package not in sys.modules:
        holder = types.ModuleType(package)
        holder.__path__ = [str(root)]
        sys.modules[package] = holder
    spec = importlib.util.spec_from_file_location(module_name, entry)
    if spec is None or spec.loader is None:
        raise BuildError(f"cannot import {entry}")
    module = importlib.util.module_from_spec(spec)
    sys.modules[module_name] = module
    try:
        spec.loader.exec_module(module)
    except Exception as error:
        del sys.modules[module_name]
        raise BuildError(
            f"importing {entry.name} failed: {type(error).__name__}: {error}"
        ) from error
    return module
