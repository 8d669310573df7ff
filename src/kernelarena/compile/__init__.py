"""Builders: one per language, each turning a Solution into a Runnable, over one build cache.

The public API, what packages above compile/ (dispatch, evaluate) use: ``build_solution`` and what
it raises (a failure cached from before: ``CachedBuildError``; its compiler's first error line:
``first_error``), the trusted cache's folder (``cache_root``) and the namespace a solution's
caches take (``namespace_of``: the library's solutions share ``LIBRARY_NAMESPACE``).
"""

from kernelarena.compile.base import (
    BuildError,
    CachedBuildError,
    DependencyMissing,
    Runnable,
    first_error,
)
from kernelarena.compile.builders import build_solution, builder_for
from kernelarena.compile.cache import LIBRARY_NAMESPACE, cache_root, namespace_of

__all__ = [
    "LIBRARY_NAMESPACE",
    "BuildError",
    "CachedBuildError",
    "DependencyMissing",
    "Runnable",
    "build_solution",
    "builder_for",
    "cache_root",
    "first_error",
    "namespace_of",
]
