"""The default dataset: the built-in library plus a folder of the user's (read and appended to)."""

from __future__ import annotations

import os
from pathlib import Path

from kernelarena.data import TraceSet
from kernelarena.library import load_library
from kernelarena.registry import add_registered


def user_dataset_root(dataset: str | Path | None = None) -> Path:
    """``--dataset``, else ``$KERNELARENA_DATASET``, else ``$XDG_DATA_HOME/kernelarena/dataset``."""
    if dataset:
        return Path(dataset)
    configured = os.environ.get("KERNELARENA_DATASET")
    if configured:
        return Path(configured)
    data_home = Path(os.environ.get("XDG_DATA_HOME") or Path.home() / ".local" / "share")
    return data_home / "kernelarena" / "dataset"


def load_default(
    dataset: str | Path | None = None, *, with_library: bool = True
) -> tuple[TraceSet, TraceSet]:
    """Return (everything, the writable user dataset). Problems are kept, never raised."""
    root = user_dataset_root(dataset)
    user = TraceSet.load(root, check_references=False) if root.is_dir() else TraceSet(root=root)
    combined = load_library() if with_library else TraceSet(root=None)
    combined.merge(user)
    combined.check_references()
    add_registered(combined)
    return combined, user
