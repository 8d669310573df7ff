"""The guard of a key's tensors compiled against this torch: ``_tensorcheck.cpp``, built
just-in-time as ``_fastcall.c`` is (``fastcall.built_in``), with the C++ compiler (``$CXX``, else
``c++`` or ``g++``), c10's headers and libc10 of the torch that runs.

``TensorCheck(*tensors)`` checks what torch's ``TensorGuards`` checks, a quarter of its cost or
less on a 2-core VM (two tensors: 0.11-0.16 against 0.57-0.63 us), because it reads each TensorImpl directly: it
needs torch's Python tensors laid out as its headers say, which the constructor verifies per
tensor (``_cdata``). Where it cannot be built, loaded or made for some tensors, ``tensor_check``
returns None and ``signature.tensor_guard`` makes torch's guard. ``KERNELARENA_APPLY_FASTPATH=0``
(the Python hot path) asks for torch's guard too.
"""

from __future__ import annotations

import hashlib
import logging
import os
import shlex
import shutil
import sys
import sysconfig
from collections.abc import Callable, Sequence
from pathlib import Path
from types import ModuleType
from typing import Any

from kernelarena.dispatch import fastcall
from kernelarena.paths import cache_base

log = logging.getLogger("kernelarena.dispatch")
SOURCE = Path(__file__).with_name("_tensorcheck.cpp")


def module() -> ModuleType | None:
    """The compiled module, built or loaded once per process; None where it cannot be."""
    return _once.module()


def status() -> str:
    """Which guard apply's keys get: ``compiled``, or ``torch's TensorGuards (why)``."""
    if not fastcall.wanted():
        return "torch's TensorGuards (KERNELARENA_APPLY_FASTPATH=0)"
    if module() is not None:
        return "compiled"
    return f"torch's TensorGuards ({_once.why})"


def tensor_check(tensors: Sequence[Any]) -> Callable[..., bool] | None:
    """The compiled check of ``tensors``, or None (not built, asked off, or tensors it refuses:
    another layout, a subclass laid out otherwise, many dimensions)."""
    compiled = module() if fastcall.wanted() else None
    if compiled is None:
        return None
    try:
        check: Callable[..., bool] = compiled.TensorCheck(*tensors)
    except (TypeError, ValueError, AttributeError, OverflowError):
        return None
    return check


def build_and_load() -> tuple[ModuleType | None, str]:
    """Build (or find built) and import the module; (None, why) where that fails. Never raises."""
    if sysconfig.get_config_var("Py_GIL_DISABLED"):
        return None, "a free-threaded Python: the C hot path relies on the GIL"
    compiler = _compiler()
    if compiler is None:
        return None, "no C++ compiler: $CXX, c++ and g++ not found"
    try:
        import torch

        root = Path(torch.__file__).parent
        flags, libraries = _flags(root, int(torch._C._GLIBCXX_USE_CXX11_ABI))
        key = _cache_key(compiler, [*flags, *libraries], torch.__version__)
        folder = cache_base() / "build" / "tensorcheck" / key
        name = f"_tensorcheck{sysconfig.get_config_var('EXT_SUFFIX') or '.so'}"
        command = [*compiler, *flags, str(SOURCE)]
        library = fastcall.built_in(
            folder, name, lambda out: fastcall.run_compiler(command, out, libraries)
        )
        return fastcall._import(library, "kernelarena.dispatch._tensorcheck"), ""
    except Exception as error:  # any failure leaves torch's guard in charge
        brief = str(error).strip().splitlines()
        why = f"{type(error).__name__}: {brief[0] if brief else ''}"[:300]
        log.info("apply's tensor guard stays torch's: %s", why)
        return None, why


def _compiler() -> list[str] | None:
    for command in (shlex.split(os.environ.get("CXX", "")), ["c++"], ["g++"]):
        found = shutil.which(command[0]) if command else None
        if found:
            return [found, *command[1:]]
    return None


def _flags(root: Path, cxx11_abi: int) -> tuple[list[str], list[str]]:
    """(compile flags, what to link): c10's headers and library, found again at run time."""
    include, lib = root / "include", root / "lib"
    if not (include / "c10" / "core" / "TensorImpl.h").exists():
        raise FileNotFoundError(f"no c10 headers under {include}")
    python = sysconfig.get_paths()["include"]
    flags = ["-O2", "-std=c++17", "-shared", "-fPIC", "-fvisibility=hidden", "-w"]
    flags += [f"-D_GLIBCXX_USE_CXX11_ABI={cxx11_abi}", f"-I{include}", f"-I{python}"]
    return flags, [f"-L{lib}", "-lc10", f"-Wl,-rpath,{lib}"]


def _cache_key(compiler: list[str], flags: list[str], torch_version: str) -> str:
    """The source, the torch it is compiled against (its headers' layouts), Python, platform
    and compiler."""
    parts = [
        SOURCE.read_bytes(),
        torch_version.encode(),
        sys.version.encode(),
        sysconfig.get_platform().encode(),
        str(sysconfig.get_config_var("EXT_SUFFIX")).encode(),
        " ".join(compiler).encode(),
        " ".join(flags).encode(),
    ]
    return hashlib.sha256(b"\0".join(parts)).hexdigest()[:24]


_once = fastcall.LoadedOnce(build_and_load)
