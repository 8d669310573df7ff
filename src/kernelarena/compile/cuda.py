"""CUDA and C++ solutions through apache-tvm-ffi: DLPack tensors in, no torch headers needed.

The entry point is a function exported with ``TVM_FFI_DLL_EXPORT_TYPED_FUNC`` taking
``tvm::ffi::TensorView`` for tensors and ``double`` / ``int64_t`` / ``bool`` for scalars, inputs
then outputs (destination-passing style). Architecture flags come from the solution's targets
(``sm_90a``) or else the device (9.0 builds as sm_90a, so Hopper-only instructions are available);
without a GPU, sm_90a, so CI still compiles every CUDA solution.

``spec.dependencies`` names libraries to link (``cublas``, ``cuda_driver``) and header libraries
(``cutlass``: CUTLASS and CuTe, see ``compile/headers.py``), whose include folders and version join
the compile and the cache key.
"""

from __future__ import annotations

import functools
import os
import re
import subprocess
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path

from kernelarena.compile.base import BuildError, DependencyMissing, Runnable
from kernelarena.compile.cache import cache_key, cached_build, write_sources
from kernelarena.compile.headers import HEADER_LIBRARIES, header_dependencies
from kernelarena.data import Definition, Language, Solution

CUDA_FLAGS = ("-O3", "-std=c++17", "--expt-relaxed-constexpr", "-lineinfo", "-DNDEBUG")
_LINK = {"cublas": ("-lcublas", "-lcublasLt"), "cuda_driver": ("-lcuda",), "cuda": ()}
_CUDA_SUFFIXES = (".cu",)
_CPP_SUFFIXES = (".cpp", ".cc", ".cxx", ".c")


@functools.lru_cache(maxsize=1)
def cuda_home() -> Path:
    # /usr/local/bin/nvcc may be a wrapper script; guessing the toolkit from it goes wrong.
    for candidate in (os.environ.get("CUDA_HOME"), os.environ.get("CUDA_PATH"), "/usr/local/cuda"):
        if candidate and (Path(candidate) / "bin" / "nvcc").exists():
            return Path(candidate)
    raise DependencyMissing("no CUDA toolkit: set CUDA_HOME to the folder holding bin/nvcc")


@functools.lru_cache(maxsize=1)
def toolchain_version() -> str:
    try:
        output = subprocess.run(
            [str(cuda_home() / "bin" / "nvcc"), "--version"],
            capture_output=True,
            text=True,
            check=True,
        ).stdout
    except (OSError, subprocess.CalledProcessError) as error:
        raise DependencyMissing(f"nvcc does not run: {error}") from None
    return output.strip().splitlines()[-1]


def device_arch(device: str) -> str | None:
    """'90a' for a Hopper device; None without a GPU. A device named by its architecture
    ('sm_90a': what the build pool builds for, in processes that make no CUDA context) is that
    architecture."""
    if re.fullmatch(r"sm_\d+[af]?", device):
        return device.removeprefix("sm_")
    if not device.startswith("cuda"):
        return None
    import torch

    major, minor = torch.cuda.get_device_capability(torch.device(device))
    suffix = "a" if major >= 9 else ""
    return f"{major}{minor}{suffix}"


def choose_arch(solution: Solution, device: str) -> str:
    targets = [
        t.lower().removeprefix("sm_")
        for t in solution.spec.target_hardware
        if re.fullmatch(r"sm_\d+[af]?", t.lower())
    ]
    here = device_arch(device)
    if here is None:
        return targets[0] if targets else "90a"
    if (
        targets
        and here not in targets
        and here.rstrip("a") not in [t.rstrip("af") for t in targets]
    ):
        raise DependencyMissing(
            f"targets {solution.spec.target_hardware}; this device is sm_{here}"
        )
    return here


class CudaBuilder:
    languages: tuple[Language, ...] = (Language.CUDA, Language.CPP)

    def build(self, definition: Definition, solution: Solution, device: str) -> Runnable:
        try:
            import tvm_ffi
            import tvm_ffi.cpp
        except ImportError:
            raise DependencyMissing("apache-tvm-ffi is not installed") from None
        arch = choose_arch(solution, device)
        link = link_flags(solution.spec.dependencies)
        headers = header_dependencies(solution.spec.dependencies)
        sources = [(s.path, s.content) for s in solution.sources]
        key = cache_key(
            kind="tvm_ffi",
            sources=sources,
            flags=CUDA_FLAGS,  # tvm-ffi adds the gencode for ``arch`` itself
            link=link,
            arch=arch,
            toolchain=toolchain_version(),
            tvm_ffi=getattr(tvm_ffi, "__version__", None),
            headers=[(h.name, h.version) for h in headers] or None,
        )
        name = f"solution_{key}"
        includes = [path for h in headers for path in h.include_paths]
        library = cached_build(
            "tvm_ffi",
            key,
            f"{name}.so",
            lambda folder: _compile(folder, name, arch, sources, link, includes),
        )
        try:
            module = tvm_ffi.load_module(str(library))
            fn = getattr(module, solution.spec.entry_symbol)
        except AttributeError:
            raise BuildError(
                f"spec.entry_point: '{solution.spec.entry_symbol}' is not exported by the module"
            ) from None
        except Exception as error:
            raise BuildError(f"loading {library.name} failed: {error}") from None
        return Runnable(
            definition,
            solution,
            fn,
            destination_passing_style=True,
            artifact=str(library),
            metadata={"arch": f"sm_{arch}", "module": module},
        )


def link_flags(dependencies: Sequence[str]) -> list[str]:
    """The linker flags: CUDA's libraries, and those ``spec.dependencies`` names."""
    link: list[str] = [f"-L{cuda_home() / 'lib64'}"]
    for dependency in dependencies:
        if dependency not in _LINK and dependency not in HEADER_LIBRARIES:
            known = sorted([*_LINK, *HEADER_LIBRARIES])
            raise BuildError(f"spec.dependencies: '{dependency}' is not one of {known}")
        link += _LINK.get(dependency, ())
    return link


def _compile(
    folder: Path,
    name: str,
    arch: str,
    sources: list[tuple[str, str]],
    link: list[str],
    includes: list[str],
) -> None:
    """Write the sources into ``folder`` and compile them there into ``<name>.so`` with tvm-ffi."""
    import tvm_ffi.cpp

    write_sources(folder, sources)
    cuda_files = [str(folder / p) for p, _ in sources if p.endswith(_CUDA_SUFFIXES)]
    cpp_files = [str(folder / p) for p, _ in sources if p.endswith(_CPP_SUFFIXES)]
    if not cuda_files and not cpp_files:
        raise BuildError("sources: no .cu or .cpp file to compile")
    environment = {"CUDA_HOME": str(cuda_home()), "TVM_FFI_CUDA_ARCH_LIST": arch_list_entry(arch)}
    with environment_set(environment):
        try:
            tvm_ffi.cpp.build(
                name=name,
                cuda_files=cuda_files or None,
                cpp_files=cpp_files or None,
                extra_cuda_cflags=list(CUDA_FLAGS),
                extra_cflags=["-O3", "-std=c++17"],
                extra_ldflags=link,
                extra_include_paths=[str(folder), *includes],
                build_directory=str(folder),
            )
        except Exception as error:
            raise BuildError(f"compiling for sm_{arch} failed:\n{trim_log(str(error))}") from None


def arch_list_entry(arch: str) -> str:
    """'90a' -> '9.0a', '100a' -> '10.0a', '89' -> '8.9' (tvm-ffi's TVM_FFI_CUDA_ARCH_LIST form)."""
    match = re.fullmatch(r"(\d+)(\d)([af]?)", arch)
    if match is None:
        raise BuildError(f"cannot read architecture '{arch}'")
    major, minor, suffix = match.groups()
    return f"{major}.{minor}{suffix}"


def trim_log(log: str, limit: int = 6000) -> str:
    return log if len(log) <= limit else log[:2000] + "\n...\n" + log[-(limit - 2000) :]


@contextmanager
def environment_set(values: dict[str, str]) -> Iterator[None]:
    """``values`` in os.environ for the duration (build tools read their settings from there)."""
    saved = {k: os.environ.get(k) for k in values}
    os.environ.update(values)
    try:
        yield
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
