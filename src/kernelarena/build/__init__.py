"""Builders: one per language, each turning a Solution into a Runnable, over one build cache."""

from kernelarena.build.base import (
    BuildError,
    CachedBuildError,
    DependencyMissing,
    Runnable,
    build_solution,
    builder_for,
    first_error,
)

__all__ = [
    "BuildError",
    "CachedBuildError",
    "DependencyMissing",
    "Runnable",
    "build_solution",
    "builder_for",
    "first_error",
]
