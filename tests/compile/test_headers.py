"""Header libraries in ``spec.dependencies``: ``cutlass`` puts the CUTLASS/CuTe include folders on the
compile (tvm-ffi and torch bindings), joins the cache key, and without its package says which
extra to install. The CuTe compile runs on a CPU (sm_90a, nothing launched)."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

from kernelarena.compile import DependencyMissing, build_solution
from kernelarena.compile.headers import CUTLASS_OVERRIDE, cutlass_headers, header_dependencies
from kernelarena.data import AxisVar, BuildSpec, Definition, Solution, SourceFile, TensorSpec

DEFINITION = Definition(
    name="copy_cute",
    op_type="test",
    axes={"n": AxisVar()},
    inputs={"x": TensorSpec(shape=["n"], dtype="float32")},
    outputs={"out": TensorSpec(shape=["n"], dtype="float32")},
    reference="def run(x):\n    return x.clone()\n",
)

# A CuTe copy: each block tiles 128 values, each thread moves 4 through a register fragment.
CUTE_COPY = """#include <cute/tensor.hpp>
#include <tvm/ffi/container/tensor.h>
#include <tvm/ffi/extra/c_env_api.h>
#include <tvm/ffi/function.h>

using namespace cute;

__global__ void copy_kernel(const float* x, float* out, int n) {
  Tensor gx = make_tensor(make_gmem_ptr(x), make_layout(n));
  Tensor go = make_tensor(make_gmem_ptr(out), make_layout(n));
  Tensor tx = local_tile(gx, Shape<_128>{}, blockIdx.x);
  Tensor to = local_tile(go, Shape<_128>{}, blockIdx.x);
  Tensor frag = make_tensor<float>(Shape<_4>{});
  for (int i = 0; i < 4; ++i) {
    const int j = threadIdx.x * 4 + i;
    if (blockIdx.x * 128 + j < n) frag(i) = tx(j);
  }
  for (int i = 0; i < 4; ++i) {
    const int j = threadIdx.x * 4 + i;
    if (blockIdx.x * 128 + j < n) to(j) = frag(i);
  }
}

void run(tvm::ffi::TensorView x, tvm::ffi::TensorView out) {
  const int n = static_cast<int>(x.size(0));
  if (n == 0) return;
  auto stream = static_cast<cudaStream_t>(TVMFFIEnvGetStream(x.device().device_type, x.device().device_id));
  copy_kernel<<<(n + 127) / 128, 32, 0, stream>>>(static_cast<const float*>(x.data_ptr()),
                                                    static_cast<float*>(out.data_ptr()), n);
}
TVM_FFI_DLL_EXPORT_TYPED_FUNC(run, run);
"""


def _bundled_cutlass() -> Path | None:
    """A CUTLASS tree to test with: the nvidia-cutlass package, else FlashInfer's bundled copy."""
    if importlib.util.find_spec("cutlass_library") is not None:
        return None  # the package itself
    spec = importlib.util.find_spec("flashinfer")
    if spec is None or not spec.submodule_search_locations:
        pytest.skip("neither nvidia-cutlass (kernelarena[cute]) nor flashinfer's CUTLASS is here")
    root = Path(next(iter(spec.submodule_search_locations))) / "data" / "cutlass"
    if not (root / "include" / "cute" / "tensor.hpp").is_file():
        pytest.skip(f"no CUTLASS headers under {root}")
    return root


def _solution(dependencies: list[str]) -> Solution:
    return Solution(
        name="copy_cute_cuda",
        definition="copy_cute",
        author="test",
        spec=BuildSpec(
            language="cuda",
            target_hardware=["sm_90a"],
            entry_point="copy.cu::run",
            dependencies=dependencies,
        ),
        sources=[SourceFile(path="copy.cu", content=CUTE_COPY)],
    )


def test_missing_cutlass_names_the_extra(monkeypatch):
    monkeypatch.delenv(CUTLASS_OVERRIDE, raising=False)
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None)
    with pytest.raises(DependencyMissing, match=r"kernelarena\[cute\]"):
        cutlass_headers()


def test_override_without_cute_is_refused(monkeypatch, tmp_path):
    monkeypatch.setenv(CUTLASS_OVERRIDE, str(tmp_path))
    with pytest.raises(DependencyMissing, match=r"no include/cute/tensor\.hpp"):
        header_dependencies(["cutlass"])


def test_other_dependencies_are_not_headers():
    assert header_dependencies(["cublas", "cuda_driver"]) == []


def test_cute_solution_compiles_for_sm90a(monkeypatch, tmp_path):
    """A CUDA solution including <cute/tensor.hpp> compiles (tvm-ffi binding) for sm_90a, and the
    header library's version is part of the build: another CUTLASS tree builds anew."""
    root = _bundled_cutlass()
    if root is not None:
        monkeypatch.setenv(CUTLASS_OVERRIDE, str(root))
    monkeypatch.setenv("KERNELARENA_CACHE", str(tmp_path))
    runnable = build_solution(DEFINITION, _solution(["cutlass"]), "cpu")
    assert runnable.metadata["arch"] == "sm_90a"
    assert runnable.artifact is not None and Path(runnable.artifact).stat().st_size > 0
    assert callable(runnable.fn)


def test_cute_without_the_dependency_does_not_find_the_headers(monkeypatch, tmp_path):
    """Without ``dependencies: ["cutlass"]`` the include folders are not added: the compile fails
    on the missing header (a BuildError naming it), it does not pick up a stray copy."""
    from kernelarena.compile import BuildError

    monkeypatch.setenv("KERNELARENA_CACHE", str(tmp_path))
    with pytest.raises(BuildError, match=r"cute/tensor\.hpp"):
        build_solution(DEFINITION, _solution([]), "cpu")
