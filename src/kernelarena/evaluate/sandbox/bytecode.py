"""Bytecode for kernelarena's own processes where the environment keeps none.

Every judge and sandbox is a fresh interpreter that imports torch. Where bytecode is neither shipped
nor written (container images that set ``PYTHONDONTWRITEBYTECODE`` and install without ``.pyc``,
as the lent GPU machines do), each of them compiles torch's sources again: ``import torch`` took
4.3-4.7 s on an H100 host so, against 1.1-1.3 s with bytecode. There the judge keeps the bytecode
it compiles under a folder of its own (``PYTHONPYCACHEPREFIX``) and sandboxes read it.

Sandboxes never write it: a solution that could plant bytecode there would run it in the next
judge. The folder is outside every folder a sandbox may write (``worker._sandbox_writable``), and
sandboxes start with bytecode writing off, so even the imports they make before confinement do not
write it. ``KERNELARENA_BYTECODE=0`` turns all of this off; ``KERNELARENA_BYTECODE_CACHE`` moves
the folder (default ``$XDG_STATE_HOME/kernelarena/bytecode``, i.e. ``~/.local/state/...``).
"""

from __future__ import annotations

import importlib.util
import os
import sys
from pathlib import Path

# This module is imported by the command line before anything heavy: standard library only.


def bytecode_folder() -> Path:
    configured = os.environ.get("KERNELARENA_BYTECODE_CACHE")
    if configured:
        return Path(configured)
    state = os.environ.get("XDG_STATE_HOME") or str(Path.home() / ".local" / "state")
    return Path(state) / "kernelarena" / "bytecode"


def _torch_bytecode_present() -> bool:
    """Whether torch's own bytecode sits beside its sources, as a default pip install leaves it
    (then nothing here is needed). Looks, does not import."""
    spec = importlib.util.find_spec("torch")
    if spec is None or spec.origin is None:
        return True
    try:
        return Path(importlib.util.cache_from_source(spec.origin)).exists()
    except (NotImplementedError, ValueError):
        return True


def _needed(environment: dict[str, str]) -> bool:
    if environment.get("KERNELARENA_BYTECODE", "1") == "0":
        return False
    if environment.get("PYTHONPYCACHEPREFIX"):
        return False  # the user chose where bytecode goes
    writes_off = bool(environment.get("PYTHONDONTWRITEBYTECODE") or sys.flags.dont_write_bytecode)
    return writes_off or not _torch_bytecode_present()


def _folder_for(environment: dict[str, str]) -> Path | None:
    """kernelarena's bytecode folder, made, where ``environment`` keeps no bytecode; else None."""
    if not _needed(environment):
        return None
    folder = bytecode_folder()
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError:
        return None
    return folder


def with_bytecode(environment: dict[str, str], writes: bool) -> dict[str, str]:
    """``environment`` for a child interpreter: reading, and with ``writes`` writing, bytecode in
    kernelarena's folder where the environment would otherwise compile every import anew. Without
    ``writes`` (sandboxes) the child writes no bytecode anywhere."""
    child = dict(environment)
    folder = _folder_for(environment)
    if folder is not None:
        child["PYTHONPYCACHEPREFIX"] = str(folder)
        if writes:
            child.pop("PYTHONDONTWRITEBYTECODE", None)
    if not writes:
        child["PYTHONDONTWRITEBYTECODE"] = "1"
    return child


def keep_bytecode_here() -> None:
    """The same for this process, from now on: the command line calls it before its own imports
    (typer, rich, pydantic: 0.3 s of compiling on such a machine). Only for kernelarena's own
    processes, which run no solution code; never for a program that imports kernelarena."""
    folder = _folder_for(dict(os.environ))
    if folder is not None:
        sys.pycache_prefix = str(folder)
        sys.dont_write_bytecode = False
