"""Builders: one per language, each turning a Solution into a Runnable, over one build cache."""

from kernelarena.build.base import (
    BuildError,
    DependencyMissing,
    Runnable,
    build_solution,
    builder_for,
)

__all__ = ["BuildError", "DependencyMissing", "Runnable", "build_solution", "builder_for"]
