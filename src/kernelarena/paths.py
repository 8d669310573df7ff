"""Where kernelarena keeps what it writes for itself: a module of its own, free of the schemas and
of torch, so that code on the way to a decorated function's first call can find its folder."""

from __future__ import annotations

import os
from pathlib import Path


def cache_base() -> Path:
    """``$KERNELARENA_CACHE`` or ``~/.cache/kernelarena``: builds, dispatch tables, sandboxes'."""
    configured = os.environ.get("KERNELARENA_CACHE")
    return Path(configured) if configured else Path.home() / ".cache" / "kernelarena"
