"""The hot path of ``@apply`` compiled: ``_fastcall.c``, built just-in-time, as Triton builds its
launchers.

A decorated function is a ``FastCall`` (C) in front of the Python wrapper (``apply.routed``): it
decides the calls whose guard passes and hands every other call, with the same arguments, to the
wrapper. Built on first use with the C compiler (``$CC``, else ``cc`` or ``gcc``) against this
Python's headers, into ``<cache>/build/fastcall/<key>/`` (the build cache's lifecycle: a file
lock, the key hashing the source, the Python version and platform, and the compiler; a failed
compile is kept and not tried again until the key changes or ``KERNELARENA_RETRY_FAILED_BUILDS=1``).
Where it cannot be built or loaded, the Python wrapper stands alone, and ``status()`` (printed by
``kernelarena doctor``) says why. ``KERNELARENA_APPLY_FASTPATH=0`` asks for the Python wrapper.
"""

from __future__ import annotations

import hashlib
import importlib.util
import logging
import os
import shlex
import shutil
import subprocess
import sys
import sysconfig
import threading
from collections.abc import Callable, Sequence
from pathlib import Path
from types import ModuleType
from typing import Any

from kernelarena.paths import cache_base

log = logging.getLogger("kernelarena.dispatch")
SOURCE = Path(__file__).with_name("_fastcall.c")
_COMPILE_SECONDS = 120


class LoadedOnce:
    """A just-in-time module, built or loaded on the first ``module()`` in the process by
    ``build`` (which returns (module, why not) and never raises); None where it could not be,
    and ``why`` says why."""

    def __init__(self, build: Callable[[], tuple[ModuleType | None, str]]) -> None:
        self._build = build
        self._lock = threading.Lock()
        self.loaded: tuple[ModuleType | None, str] | None = None

    def module(self) -> ModuleType | None:
        if self.loaded is None:
            with self._lock:
                if self.loaded is None:
                    self.loaded = self._build()
        return self.loaded[0]

    @property
    def why(self) -> str:
        self.module()
        assert self.loaded is not None
        return self.loaded[1]


def module() -> ModuleType | None:
    """The compiled module, built or loaded on the first call in the process; None where it
    cannot be (``status()`` says why)."""
    return _once.module()


def wanted() -> bool:
    return os.environ.get("KERNELARENA_APPLY_FASTPATH") != "0"


def status() -> str:
    """Which hot path a function decorated now gets: ``compiled``, or ``Python (why)``."""
    if not wanted():
        return "Python (KERNELARENA_APPLY_FASTPATH=0)"
    if module() is not None:
        return "compiled"
    return f"Python ({_once.why})"


def fast_callable(slow: Callable[..., Any], fallback: Callable[..., Any], arity: int) -> Any:
    """A ``FastCall`` in front of ``slow`` (the Python wrapper), or None where the Python
    wrapper is to stand alone."""
    compiled = module() if wanted() else None
    if compiled is None:
        return None
    return compiled.FastCall(slow, fallback, arity)


def new_slot(fast: Any) -> Any:
    """An empty ``HitSlot`` for a site whose hot path is ``fast``; None for the Python wrapper."""
    compiled = module() if fast is not None else None
    return None if compiled is None else compiled.HitSlot()


def build_and_load() -> tuple[ModuleType | None, str]:
    """Build (or find built) and import the module; (None, why) where that fails. Never raises:
    the Python wrapper serves every call without it."""
    if sysconfig.get_config_var("Py_GIL_DISABLED"):
        return None, "a free-threaded Python: the C hot path relies on the GIL"
    compiler = _compiler()
    if compiler is None:
        return None, "no C compiler: $CC, cc and gcc not found"
    include = Path(sysconfig.get_paths()["include"])
    if not (include / "Python.h").exists():
        return None, f"no Python headers ({include / 'Python.h'} missing)"
    try:
        library = _built(compiler, include)
        return _import(library), ""
    except Exception as error:  # any failure leaves the Python wrapper in charge
        brief = str(error).strip().splitlines()
        why = f"{type(error).__name__}: {brief[0] if brief else ''}"[:300]
        log.info("apply's hot path stays in Python: %s", why)
        return None, why


def _compiler() -> list[str] | None:
    """The compiler's command: ``$CC`` (which may hold a launcher, ``ccache gcc``), else cc or
    gcc; None where none is found."""
    for command in (shlex.split(os.environ.get("CC", "")), ["cc"], ["gcc"]):
        found = shutil.which(command[0]) if command else None
        if found:
            return [found, *command[1:]]
    return None


def _flags(include: Path) -> list[str]:
    return ["-O2", "-shared", "-fPIC", "-fvisibility=hidden", f"-I{include}"]


def cache_key(compiler: list[str], include: Path) -> str:
    parts = [
        SOURCE.read_bytes(),
        sys.version.encode(),
        sysconfig.get_platform().encode(),
        str(sysconfig.get_config_var("EXT_SUFFIX")).encode(),
        " ".join(compiler).encode(),
        " ".join(_flags(include)).encode(),
    ]
    return hashlib.sha256(b"\0".join(parts)).hexdigest()[:24]


def _library_name() -> str:
    return f"_fastcall{sysconfig.get_config_var('EXT_SUFFIX') or '.so'}"


def _built(compiler: list[str], include: Path) -> Path:
    """The library, compiled unless a process built it before (``built_in``)."""
    folder = cache_base() / "build" / "fastcall" / cache_key(compiler, include)
    return built_in(folder, _library_name(), lambda library: _compile(compiler, include, library))


def built_in(folder: Path, name: str, compile_to: Callable[[Path], None]) -> Path:
    """``folder / name``, made by ``compile_to`` unless a process built it before; the build
    cache's lifecycle (look, lock, look again, build), here without its schemas, which a
    decoration should not import: the library appears under its name whole (renamed into place
    by ``run_compiler``) or not at all, and a ``CompileError`` is kept."""
    library = folder / name
    if library.exists():
        return library
    _raise_kept_failure(folder)
    folder.mkdir(parents=True, exist_ok=True)
    from filelock import FileLock

    with FileLock(str(folder / ".lock")):
        if not library.exists():
            _raise_kept_failure(folder)
            try:
                compile_to(library)
            except CompileError as error:
                (folder / _ERROR_FILE).write_text(str(error), encoding="utf-8")
                raise
    return library


class CompileError(RuntimeError):
    """The compiler refused or failed: its first error line."""


_ERROR_FILE = ".error"


def _raise_kept_failure(folder: Path) -> None:
    """A compile of this key failed before: its error again, without compiling, unless
    ``KERNELARENA_RETRY_FAILED_BUILDS=1`` (as for solutions' builds)."""
    kept = folder / _ERROR_FILE
    if not kept.exists():
        return
    if os.environ.get("KERNELARENA_RETRY_FAILED_BUILDS") == "1":
        kept.unlink(missing_ok=True)
        return
    raise CompileError(f"{kept.read_text(encoding='utf-8', errors='replace')} (kept from before)")


def _compile(compiler: list[str], include: Path, library: Path) -> None:
    run_compiler([*compiler, *_flags(include), str(SOURCE)], library)


def run_compiler(command: list[str], library: Path, after: Sequence[str] = ()) -> None:
    """``command -o <library> *after`` (libraries to link come after the output)."""
    # Written beside its final name and renamed: a process that finds the name finds it whole.
    partial = library.with_name(f".{library.name}.{os.getpid()}.partial")
    name = Path(command[0]).name
    # A compiler that did not start, ran out of time or was killed may do better next time: its
    # failure is not kept (a RuntimeError, not a CompileError).
    try:
        done = subprocess.run(
            [*command, "-o", str(partial), *after],
            capture_output=True,
            text=True,
            timeout=_COMPILE_SECONDS,
        )
    except (OSError, subprocess.TimeoutExpired) as error:
        raise RuntimeError(f"{name}: {error}") from None
    if done.returncode < 0:
        raise RuntimeError(f"{name}: killed by signal {-done.returncode}")
    if done.returncode != 0:
        partial.unlink(missing_ok=True)
        lines = [line for line in (done.stderr or done.stdout).splitlines() if line.strip()]
        first = next((line for line in lines if "error" in line), lines[0] if lines else "")
        raise CompileError(f"{name} failed: {first.strip()}")
    os.replace(partial, library)


def _import(library: Path, name: str = "kernelarena.dispatch._fastcall") -> ModuleType:
    spec = importlib.util.spec_from_file_location(name, library)
    if spec is None or spec.loader is None:
        raise ImportError(f"cannot load {library}")
    loaded = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(loaded)
    return loaded


_once = LoadedOnce(build_and_load)
