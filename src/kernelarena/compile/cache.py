"""The build cache: content-addressed folders, built once under a file lock.

Lifecycle (FlashInfer's): look for the finished artifact; if missing, take the folder's lock, look
again (another process may have built it meanwhile), build, mark finished. Keys hash the sources,
flags, architecture and toolchain, so a change to any of them builds anew.

A build that fails is cached too: its error is kept in the folder (``.error``) and raised again,
as a ``CachedBuildError``, without compiling, until the key changes or
``KERNELARENA_RETRY_FAILED_BUILDS=1`` asks for another try (a header installed since, say). What
may pass on another try is not kept: a missing dependency, and a compiler killed or starved
(out of memory, disk full).
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
from kernelarena.paths import cache_base as cache_base  # re-exported

ERROR_FILE = ".error"
# Failures of the machine rather than of the sources: never cached.
_TRANSIENT = (
    "Killed",
    "terminated by signal",
    "No space left on device",
    "Cannot allocate memory",
    "out of memory",
    "Resource temporarily unavailable",
    "Too many open files",
)


def cache_root() -> Path:
    return cache_base() / "build"


def sandbox_caches_root() -> Path:
    """Where sandboxes keep their caches, one folder per solution (``sandbox_cache``); the rest of
    ``cache_base()`` is written by trusted processes only."""
    return cache_base() / "sandboxes"


def sandbox_cache(namespace: str) -> Path:
    """The caches of the solutions of one namespace (``namespace_of``; ``evaluate.sandbox.solution_caches``
    points a sandbox's caches there)."""
    if not namespace or not all(c.isalnum() or c in "-_" for c in namespace):
        raise ValueError(f"cache namespace {namespace!r}: letters, digits, '-' and '_' only")
    return sandbox_caches_root() / namespace


# A sandbox's caches are its solution's: the namespace is the solution's content hash, except
# that the library's solutions (kernelarena's own code) share one.
LIBRARY_NAMESPACE = "library"


@functools.cache
def library_solution_hash(name: str) -> str | None:
    """The content hash of the library's solution called ``name``, or None if it has none."""
    from kernelarena.library import library_solution

    twin = library_solution(name)
    return None if twin is None else twin.content_hash()


def namespace_of(solution: Solution) -> str:
    """``library`` for a solution whose content is one of the library's, else its content hash.
    The name is part of the content hash, so only the library's solution of the same name can
    match: one solution read and hashed, not the library's ~190 (0.3-0.6 s a process)."""
    digest = solution.content_hash()
    return LIBRARY_NAMESPACE if library_solution_hash(solution.name) == digest else digest


def cache_key(**parts: Any) -> str:
    canonical = json.dumps(parts, sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(canonical.encode()).hexdigest()[:24]


def cached_build(kind: str, key: str, artifact_name: str, build: Callable[[Path], None]) -> Path:
    """Return ``<cache>/<kind>/<key>/<artifact_name>``, running ``build(folder)`` at most once;
    a ``BuildError`` it raised is raised again for this key without building."""
    # Here, not at the top: the sandboxes' start-up reads ``cache_base`` without the schemas.
    from kernelarena.compile.base import BuildError, DependencyMissing

    folder = cache_root() / kind / key
    artifact = folder / artifact_name
    done = folder / ".done"
    if done.exists() and artifact.exists():
        return artifact
    _raise_cached_failure(folder)
    folder.mkdir(parents=True, exist_ok=True)
    with FileLock(str(folder / ".lock")):
        if done.exists() and artifact.exists():
            return artifact
        _raise_cached_failure(folder)
        try:
            build(folder)
        except DependencyMissing:
            raise
        except BuildError as error:
            if not any(marker in str(error) for marker in _TRANSIENT):
                (folder / ERROR_FILE).write_text(str(error), encoding="utf-8")
            raise
        if not artifact.exists():
            raise FileNotFoundError(f"build produced no {artifact_name} in {folder}")
        done.write_text(key)
    return artifact


def _raise_cached_failure(folder: Path) -> None:
    """Raise the error a build of this key failed with before, if one is kept (and no retry is
    asked for: then it is dropped)."""
    from kernelarena.compile.base import CachedBuildError

    kept = folder / ERROR_FILE
    if not kept.exists():
        return
    if os.environ.get("KERNELARENA_RETRY_FAILED_BUILDS") == "1":
        kept.unlink(missing_ok=True)
        return
    try:
        text = kept.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return
    raise CachedBuildError(
        f"{text}\n(this build failed before with the same sources, flags and toolchain: its error "
        "is kept in the build cache; KERNELARENA_RETRY_FAILED_BUILDS=1 or "
        "'kernelarena build --retry-failed' builds it again)"
    )


def write_sources(folder: Path, sources: list[tuple[str, str]]) -> None:
    for relative, content in sources:
        target = folder / relative
        target.parent.mkdir(parents=True, exist_ok=True)
        if not target.exists() or target.read_text(encoding="utf-8") != content:
            target.write_text(content, encoding="utf-8")
