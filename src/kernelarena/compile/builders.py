"""Which builder turns a solution into a Runnable: one per language (and, for CUDA and C++, per
binding). The builders import ``base``; this module imports them, so nothing imports back."""

from __future__ import annotations

from kernelarena.compile.base import Builder, BuildError, Runnable
from kernelarena.compile.cuda import CudaBuilder
from kernelarena.compile.cute_dsl import CuteDslBuilder
from kernelarena.compile.python import PythonBuilder
from kernelarena.compile.tilelang import TileLangBuilder
from kernelarena.compile.torch_extension import TorchExtensionBuilder
from kernelarena.data import Definition, Language, Solution

# spec.binding of CUDA and C++ solutions (FlashInfer-Bench's names); none means tvm-ffi.
BINDINGS = ("tvm-ffi", "torch")


def builder_for(solution: Solution) -> Builder:
    language = solution.spec.language
    if language in (Language.CUDA, Language.CPP):
        binding = solution.spec.binding or "tvm-ffi"
        if binding not in BINDINGS:
            raise BuildError(f"spec.binding: '{binding}' is not one of {list(BINDINGS)}")
        return TorchExtensionBuilder() if binding == "torch" else CudaBuilder()
    if language in PythonBuilder.languages:
        return PythonBuilder()
    if language in TileLangBuilder.languages:
        return TileLangBuilder()
    if language in CuteDslBuilder.languages:
        return CuteDslBuilder()
    raise BuildError(f"spec.language: no builder for '{language.value}' here")


def build_solution(definition: Definition, solution: Solution, device: str = "cpu") -> Runnable:
    return builder_for(solution).build(definition, solution, device)
