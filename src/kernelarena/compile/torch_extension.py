"""CUDA and C++ solutions with ``"binding": "torch"``: PyTorch extensions, built by torch.utils.cpp_extension.

FlashInfer-Bench's published CUDA solutions are written this way: device code in ``kernel.h`` and
``kernel.cu``, and a ``main.cpp`` that includes ``<torch/extension.h>`` and exports the entry point
with ``PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) { m.def("run", &run); }``. Tensors arrive as
``torch::Tensor``, scalars as ``double``, ``int64_t`` or ``bool``; ``spec.destination_passing_style``
says whether the outputs are passed in (the default) or returned.

The extension is built with ninja for the device's architecture (``TORCH_CUDA_ARCH_LIST`` from its
capability: 9.0a on Hopper, so sm_90a instructions are there), in the same content-addressed, locked
build cache as the tvm-ffi builder, so parallel workers build it once. CUDA sources need a CUDA build
of torch (its CUDA libraries are what the extension links against): on a CPU-only torch such a
solution is skipped, not failed. A C++-only extension builds and runs on any torch.
"""

from __future__ import annotations

import importlib.machinery
import importlib.util
import sys
import types
from pathlib import Path

from kernelarena.compile.base import BuildError, DependencyMissing, Runnable
from kernelarena.compile.cache import cache_key, cached_build, write_sources
from kernelarena.compile.cuda import (
    arch_list_entry,
    choose_arch,
    cuda_home,
    environment_set,
    toolchain_version,
    trim_log,
)
from kernelarena.compile.headers import HEADER_LIBRARIES, header_dependencies
from kernelarena.data import Definition, Language, Solution

CXX_FLAGS = ("-O3",)
CUDA_FLAGS = ("-O3", "-lineinfo")
_COMPILED_SUFFIXES = (".cu", ".cpp", ".cc", ".cxx", ".c")
# Libraries a solution may name in spec.dependencies; torch and the CUDA runtime come with torch.
_LINK = {"cublas": ("-lcublas", "-lcublasLt"), "cuda_driver": ("-lcuda",), "cuda": (), "torch": ()}


def needs_cuda(solution: Solution) -> bool:
    return solution.spec.language is Language.CUDA or any(
        s.path.endswith(".cu") for s in solution.sources
    )


class TorchExtensionBuilder:
    languages: tuple[Language, ...] = (Language.CUDA, Language.CPP)

    def build(self, definition: Definition, solution: Solution, device: str) -> Runnable:
        import torch

        sources = [(s.path, s.content) for s in solution.sources]
        compiled = [path for path, _ in sources if path.endswith(_COMPILED_SUFFIXES)]
        if not compiled:
            raise BuildError(f"sources: no {' or '.join(_COMPILED_SUFFIXES)} file to compile")
        with_cuda = needs_cuda(solution)
        if with_cuda and torch.version.cuda is None:
            raise DependencyMissing(
                f"binding 'torch' with CUDA sources needs a CUDA build of torch "
                f"(this is torch {torch.__version__}, built for the CPU only)"
            )
        arch = choose_arch(solution, device) if with_cuda else None
        ldflags = _link_flags(solution, with_cuda)
        headers = header_dependencies(solution.spec.dependencies)
        includes = [path for h in headers for path in h.include_paths]
        key = cache_key(
            kind="torch_extension",
            sources=sources,
            cxx_flags=CXX_FLAGS,
            cuda_flags=CUDA_FLAGS if with_cuda else None,
            ldflags=ldflags,
            arch=arch,
            toolchain=toolchain_version() if with_cuda else None,
            torch=torch.__version__,
            python=sys.version_info[:2],
            headers=[(h.name, h.version) for h in headers] or None,
        )
        # The module name is baked into the library (PyInit_<name>), so it carries the key too.
        name = f"solution_{key}"

        def compile_into(folder: Path) -> None:
            write_sources(folder, sources)
            _compile(name, folder, compiled, with_cuda, arch, ldflags, includes)

        library = cached_build("torch_extension", key, f"{name}.so", compile_into)
        module = _import_extension(name, library)
        fn = getattr(module, solution.spec.entry_symbol, None)
        if not callable(fn):
            exported = sorted(n for n in dir(module) if not n.startswith("_"))
            raise BuildError(
                f"spec.entry_point: '{solution.spec.entry_symbol}' is not defined by the module's "
                f"PYBIND11_MODULE (it defines {exported})"
            )
        return Runnable(
            definition,
            solution,
            fn,
            solution.spec.destination_passing_style,
            artifact=str(library),
            metadata={"arch": f"sm_{arch}" if arch else "cpu", "binding": "torch"},
        )


def _link_flags(solution: Solution, with_cuda: bool) -> list[str]:
    flags: list[str] = [f"-L{cuda_home() / 'lib64'}"] if with_cuda else []
    for dependency in solution.spec.dependencies:
        if dependency in HEADER_LIBRARIES:
            continue  # include folders, not link flags (header_dependencies)
        if dependency not in _LINK:
            # FlashInfer-Bench accepts and ignores names it does not know: a library that is not
            # here would fail to compile or link, which is no fault of the solution.
            known = sorted([*_LINK, *HEADER_LIBRARIES])
            raise DependencyMissing(
                f"spec.dependencies: '{dependency}' is not provided here (known: {known})"
            )
        flags += _LINK[dependency]
    return flags


def _compile(
    name: str,
    folder: Path,
    compiled: list[str],
    with_cuda: bool,
    arch: str | None,
    ldflags: list[str],
    includes: list[str],
) -> None:
    from torch.utils import cpp_extension

    try:
        cpp_extension.verify_ninja_availability()
    except RuntimeError:
        raise DependencyMissing("ninja is not installed (pip install ninja)") from None
    environment = {"TORCH_CUDA_ARCH_LIST": arch_list_entry(arch)} if arch else {}
    if with_cuda:
        environment["CUDA_HOME"] = str(cuda_home())
    with environment_set(environment):
        try:
            cpp_extension.load(
                name=name,
                sources=[str(folder / path) for path in compiled],
                extra_cflags=list(CXX_FLAGS),
                extra_cuda_cflags=list(CUDA_FLAGS) if with_cuda else None,
                extra_ldflags=ldflags,
                extra_include_paths=[str(folder), *includes],
                build_directory=str(folder),
                with_cuda=with_cuda,
                verbose=False,
            )
        except Exception as error:
            target = f"sm_{arch}" if arch else "the CPU"
            raise BuildError(
                f"compiling the torch extension for {target} failed:\n{trim_log(str(error))}"
            ) from None


def _import_extension(name: str, library: Path) -> types.ModuleType:
    """The built module: from this process's modules when it was built here, else from the cache."""
    if name in sys.modules:
        return sys.modules[name]
    loader = importlib.machinery.ExtensionFileLoader(name, str(library))
    spec = importlib.util.spec_from_file_location(name, library, loader=loader)
    if spec is None:
        raise BuildError(f"cannot import {library}")
    try:
        module = importlib.util.module_from_spec(spec)
        loader.exec_module(module)
    except ImportError as error:
        raise BuildError(f"loading {library.name} failed: {error}") from None
    sys.modules[name] = module
    return module
