"""Header libraries a CUDA or C++ solution may name in ``spec.dependencies``.

``"cutlass"``: CUTLASS and CuTe (``#include <cute/tensor.hpp>``, ``<cutlass/numeric_types.h>``),
from the ``nvidia-cutlass`` wheel (the ``kernelarena[cute]`` extra; 4.2.0.0, a 6.4 MB wheel whose
``cutlass_library/source`` holds the C++ tree). ``KERNELARENA_CUTLASS_DIR`` points at another
CUTLASS tree (a checkout, or the copy FlashInfer bundles in ``flashinfer/data/cutlass``) instead.
The package is found without importing it (``cutlass_library`` imports cuda-python at import time).
"""

from __future__ import annotations

import importlib.metadata
import importlib.util
import os
from dataclasses import dataclass
from pathlib import Path

from kernelarena.compile.base import DependencyMissing

CUTLASS_EXTRA = "kernelarena[cute]"
CUTLASS_OVERRIDE = "KERNELARENA_CUTLASS_DIR"


@dataclass(frozen=True)
class Headers:
    """Include folders of one header library, and what identifies its version (for cache keys)."""

    name: str
    include_paths: tuple[str, ...]
    version: str


def cutlass_headers() -> Headers:
    configured = os.environ.get(CUTLASS_OVERRIDE)
    if configured:
        root = Path(configured)
        source = f"{CUTLASS_OVERRIDE}={configured}"
        version = f"dir:{root.resolve()}"
    else:
        spec = importlib.util.find_spec("cutlass_library")
        if spec is None or not spec.submodule_search_locations:
            raise DependencyMissing(
                "spec.dependencies: 'cutlass' needs the CUTLASS/CuTe headers of the nvidia-cutlass "
                f"package: pip install '{CUTLASS_EXTRA}' (or set {CUTLASS_OVERRIDE} to a CUTLASS "
                "tree holding include/cute)"
            )
        root = Path(next(iter(spec.submodule_search_locations))) / "source"
        source = "the nvidia-cutlass package"
        version = f"nvidia-cutlass=={importlib.metadata.version('nvidia-cutlass')}"
    include = root / "include"
    if not (include / "cute" / "tensor.hpp").is_file():
        raise DependencyMissing(
            f"spec.dependencies: 'cutlass': {source} has no include/cute/tensor.hpp under {root}"
        )
    paths = [include, root / "tools" / "util" / "include"]
    return Headers("cutlass", tuple(str(p) for p in paths if p.is_dir()), version)


# Header-only dependencies by the name a solution gives in spec.dependencies.
HEADER_LIBRARIES = {"cutlass": cutlass_headers}


def header_dependencies(dependencies: list[str]) -> list[Headers]:
    """The header libraries among ``dependencies``, located (DependencyMissing when absent)."""
    return [HEADER_LIBRARIES[d]() for d in dependencies if d in HEADER_LIBRARIES]
