"""The build cache: content-addressed folders, built once under a file lock.

Lifecycle (FlashInfer's): look for the finished artifact; if missing, take the folder's lock, look
again (another process may have built it meanwhile), build, mark finished. Keys hash the sources,
flags, architecture and toolchain, so a change to any of them builds anew.
"""

from __future__ import annotations

import functools
import hashlib
import json
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

from filelock import FileLock

from kernelarena.data import Solution


def cache_base() -> Path:
    """``$KERNELARENA_CACHE`` or ``~/.cache/kernelarena``: builds, dispatch tables, sandboxes'."""
    configured = os.environ.get("KERNELARENA_CACHE")
    return Path(configured) if configured else Path.home() / ".cache" / "kernelarena"


def cache_root() -> Path:
    return cache_base() / "build"


def sandbox_caches_root() -> Path:
    """Where sandboxes keep their caches, one folder per solution (``sandbox_cache``); the rest of
    ``cache_base()`` is written by trusted processes only."""
    return cache_base() / "sandboxes"


def sandbox_cache(namespace: str) -> Path:
    """The caches of the solutions of one namespace (``namespace_of``; ``evaluate.solution_caches``
    points a sandbox's caches there)."""
    if not namespace or not all(c.isalnum() or c in "-_" for c in namespace):
        raise ValueError(f"cache namespace {namespace!r}: letters, digits, '-' and '_' only")
    return sandbox_caches_root() / namespace


# A sandbox's caches are its solution's: the namespace is the solution's content hash, except
# that the library's solutions (kernelarena's own code) share one.
LIBRARY_NAMESPACE = "library"


@functools.cache
def library_solution_hashes() -> frozenset[str]:
    from kernelarena.library import load_library

    return frozenset(s.content_hash() for s in load_library().solutions.values())


def namespace_of(solution: Solution) -> str:
    """``library`` for a solution whose content is one of the library's, else its content hash."""
    digest = solution.content_hash()
    return LIBRARY_NAMESPACE if digest in library_solution_hashes() else digest


def cache_key(**parts: Any) -> str:
    canonical = json.dumps(parts, sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(canonical.encode()).hexdigest()[:24]


def cached_build(kind: str, key: str, artifact_name: str, build: Callable[[Path], None]) -> Path:
    """Return ``<cache>/<kind>/<key>/<artifact_name>``, running ``build(folder)`` at most once."""
    folder = cache_root() / kind / key
    artifact = folder / artifact_name
    done = folder / ".done"
    if done.exists() and artifact.exists():
        return artifact
    folder.mkdir(parents=True, exist_ok=True)
    with FileLock(str(folder / ".lock")):
        if done.exists() and artifact.exists():
            return artifact
        build(folder)
        if not artifact.exists():
            raise FileNotFoundError(f"build produced no {artifact_name} in {folder}")
        done.write_text(key)
    return artifact


def write_sources(folder: Path, sources: list[tuple[str, str]]) -> None:
    for relative, content in sources:
        target = folder / relative
        target.parent.mkdir(parents=True, exist_ok=True)
        if not target.exists() or target.read_text(encoding="utf-8") != content:
            target.write_text(content, encoding="utf-8")
