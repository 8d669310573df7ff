"""CuTe DSL solutions (language ``cute_dsl``, ours): Python sources using NVIDIA's CuTe DSL.

The module imports ``cutlass`` and ``cutlass.cute`` (the ``nvidia-cutlass-dsl`` package, the
``kernelarena[cute-dsl]`` extra), compiles its kernels with ``cute.compile`` on first use and
exposes a plain entry function, built and imported as a Python solution. FlashInfer-Bench 0.1.2 has
no such language, so ``kernelarena export`` leaves these solutions out (``data.FLASHINFER_LANGUAGES``).
"""

from __future__ import annotations

import importlib.metadata
import importlib.util

from kernelarena.compile.base import DependencyMissing, Runnable
from kernelarena.compile.python import PythonBuilder
from kernelarena.data import Definition, Language, Solution

CUTE_DSL_EXTRA = "kernelarena[cute-dsl]"


class CuteDslBuilder:
    languages: tuple[Language, ...] = (Language.CUTE_DSL,)

    def build(self, definition: Definition, solution: Solution, device: str) -> Runnable:
        if importlib.util.find_spec("cutlass") is None:
            raise DependencyMissing(
                f"CuTe DSL solutions need the nvidia-cutlass-dsl package: pip install '{CUTE_DSL_EXTRA}'"
            )
        runnable = PythonBuilder().build(definition, solution, device)
        try:
            version = importlib.metadata.version("nvidia-cutlass-dsl")
        except importlib.metadata.PackageNotFoundError:
            version = "?"
        runnable.metadata.update({"build_type": "cute_dsl", "nvidia-cutlass-dsl": version})
        return runnable
