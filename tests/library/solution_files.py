"""A library solution's sources written out as an importable package, as a builder writes them: for
a test that imports a Triton solution in a fresh process (its files import library/_shared/
helpers relatively, so a file alone cannot be imported)."""

from __future__ import annotations

from pathlib import Path

from kernelarena.library import load_library


def write_solution_package(solution_name: str, root: Path) -> str:
    """Writes the sources of ``solution_name`` under ``root/<package>/`` and returns the entry
    module's name (put ``root`` on sys.path to import it)."""
    solution = load_library().solutions[solution_name]
    package = solution_name
    for source in solution.sources:
        path = root / package / source.path
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(source.content, encoding="utf-8")
    return package + "." + solution.spec.entry_file.removesuffix(".py").replace("/", ".")
