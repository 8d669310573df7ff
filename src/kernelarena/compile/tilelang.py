"""TileLang solutions: Python sources that import ``tilelang``, built as Python solutions are.

As in FlashInfer-Bench, a TileLang solution is a Python module whose entry point is a plain
function; the module JIT-compiles its kernels (``tilelang.jit``) when it is imported or first
called, into TileLang's own cache (``TILELANG_CACHE_DIR``, inside the sandbox's cache folder). So a
solution written for FlashInfer-Bench builds here unchanged, and ours load there.

tilelang is an optional extra (``kernelarena[tilelang]``): without it the solution is skipped with
the extra named. tilelang 0.1.15 imports only with apache-tvm-ffi < 0.1.13 (its TVM registers its
own class for ``ffi.Tensor``, which newer tvm-ffi refuses): an environment holding a newer one is
told so, not left with a traceback (docs/decisions.md).
"""

from __future__ import annotations

import functools
import importlib.metadata
import importlib.util

from kernelarena.compile.base import DependencyMissing, Runnable
from kernelarena.compile.python import PythonBuilder
from kernelarena.data import Definition, Language, Solution

TILELANG_EXTRA = "kernelarena[tilelang]"


def _version(distribution: str) -> str:
    try:
        return importlib.metadata.version(distribution)
    except importlib.metadata.PackageNotFoundError:
        return "?"


@functools.lru_cache(maxsize=1)
def tilelang_version() -> str:
    """The version of tilelang that imports here; DependencyMissing naming the extra otherwise."""
    if importlib.util.find_spec("tilelang") is None:
        raise DependencyMissing(
            f"TileLang solutions need the tilelang package: pip install '{TILELANG_EXTRA}'"
        )
    try:
        import tilelang
    except Exception as error:
        raise DependencyMissing(
            f"tilelang {_version('tilelang')} does not import with apache-tvm-ffi "
            f"{_version('apache-tvm-ffi')} ({type(error).__name__}: {error}); "
            f"pip install '{TILELANG_EXTRA}' resolves versions that work together"
        ) from None
    return str(getattr(tilelang, "__version__", _version("tilelang")))


class TileLangBuilder:
    languages: tuple[Language, ...] = (Language.TILELANG,)

    def build(self, definition: Definition, solution: Solution, device: str) -> Runnable:
        version = tilelang_version()
        runnable = PythonBuilder().build(definition, solution, device)
        runnable.metadata.update({"build_type": "tilelang", "tilelang": version})
        return runnable
