"""Each solution's caches in a folder of its own: what one solution's code writes, no other
solution's sandbox and no trusted process ever loads.

A sandbox serves one solution. Before that solution is built it enters the solution's namespace
(``enter``): kernelarena's build cache, Triton's, Inductor's, the CUDA driver's and the home folder
point into ``compile.cache.sandbox_cache(namespace)``, and (where Landlock holds) a second layer of
confinement leaves that folder the only cache it may change. The namespace is the solution's
content hash, so a solution rerun finds its own builds; the library's solutions share one,
``library``, since their code is kernelarena's own: the benchmarks load the compiled peer's
Inductor cache from there (``benchmarks/harness.py``), and apply in a user's program builds in the
trusted ``compile.cache.cache_root()``, which no sandbox can write.
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Iterable
from pathlib import Path

from kernelarena.compile.cache import LIBRARY_NAMESPACE as LIBRARY_NAMESPACE  # re-exported
from kernelarena.compile.cache import namespace_of as namespace_of  # re-exported
from kernelarena.compile.cache import sandbox_cache, sandbox_caches_root


def cache_environment(folder: Path) -> dict[str, str]:
    """The variables that point this process's caches (and home) into ``folder``."""
    home = folder / "home"
    return {
        "KERNELARENA_CACHE": str(folder),
        "TRITON_CACHE_DIR": str(folder / "triton"),
        "TORCHINDUCTOR_CACHE_DIR": str(folder / "inductor"),
        "CUDA_CACHE_PATH": str(folder / "nv"),
        "HOME": str(home),
        "XDG_CACHE_HOME": str(home / ".cache"),
    }


def enter(namespace: str, writable: Iterable[str], confined: bool) -> str:
    """Point this process's caches at ``namespace``'s folder and, when ``confined`` (the sandbox's
    first confinement holds), confine writes to that folder and the other ``writable`` folders
    (the sandboxes' caches root dropped). Returns what holds, for the log."""
    root = sandbox_caches_root()
    return _enter_folder(sandbox_cache(namespace), root, writable, confined)


def enter_private(writable: Iterable[str], confined: bool) -> str:
    """A definition's reference: its caches in this sandbox's own temporary folder (``TMPDIR``,
    removed with the run) and, when ``confined``, its writes confined to that folder and the
    other ``writable`` folders but the sandboxes' caches, so that it writes nothing a solution's
    sandbox loads. Returns what holds, for the log."""
    root = sandbox_caches_root()  # before KERNELARENA_CACHE points elsewhere
    # TMPDIR itself: a forked sandbox sets it after the fork, where tempfile's may be cached.
    folder = Path(os.environ.get("TMPDIR") or tempfile.gettempdir()) / "caches"
    return _enter_folder(folder, root, writable, confined)


def _enter_folder(folder: Path, root: Path, writable: Iterable[str], confined: bool) -> str:
    """Point this process's caches at ``folder`` and, when ``confined``, confine writes to it
    and the ``writable`` folders but ``root`` (the sandboxes' caches). Returns what holds."""
    from kernelarena.evaluate.sandbox.bytecode import bytecode_folder
    from kernelarena.evaluate.sandbox.confine import confine_writes

    environment = cache_environment(folder)
    # The judge's bytecode folder stays where it is (its default follows HOME): read, never written.
    os.environ.setdefault("KERNELARENA_BYTECODE_CACHE", str(bytecode_folder()))
    for path in environment.values():  # the folder itself is KERNELARENA_CACHE
        Path(path).mkdir(parents=True, exist_ok=True)
    os.environ.update(environment)
    if not confined:
        return f"caches in {folder} (writes not confined)"
    others = [w for w in writable if Path(w) != root]
    return f"caches in {folder}; " + confine_writes([str(folder), *others])
