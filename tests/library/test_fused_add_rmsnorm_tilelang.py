"""fused_add_rmsnorm in TileLang. Without tilelang: the build is skipped with the extra named. With
it, on a CPU: the project's build path imports the solution and TileLang lowers its kernels to CUDA
for sm_90a (compiled by nvcc, nothing launched): 16-byte accesses for contiguous rows, strides as
arguments for strided ones. On the GPU (marked ``gpu``): every workload of every dtype against
the reference."""

from __future__ import annotations

import importlib.util
import re

import pytest

from kernelarena.compile import DependencyMissing
from kernelarena.compile import tilelang as tilelang_builder
from kernelarena.testing import build, check_every_workload

NAME = "fused_add_rmsnorm"
SUFFIXES = ("fp32", "fp16", "bf16")


def _tilelang_or_skip() -> None:
    try:
        tilelang_builder.tilelang_version()
    except DependencyMissing as error:
        pytest.skip(str(error))


def test_without_tilelang_the_build_names_the_extra(monkeypatch):
    tilelang_builder.tilelang_version.cache_clear()
    real = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util, "find_spec", lambda n, *a: None if n == "tilelang" else real(n, *a)
    )
    try:
        with pytest.raises(DependencyMissing, match=r"pip install 'kernelarena\[tilelang\]'"):
            build(f"{NAME}_bf16", "tilelang", "cpu")
    finally:
        tilelang_builder.tilelang_version.cache_clear()


@pytest.mark.timeout(900)
def test_lowers_to_cuda_for_sm90a():
    _tilelang_or_skip()
    runnable = build(f"{NAME}_bf16", "tilelang", "cpu")
    assert runnable.metadata["build_type"] == "tilelang"
    module = runnable.fn.__globals__
    # (hidden, dtype, strided, 16-byte accesses expected)
    cases = [
        (4096, "bfloat16", False, True),
        (8192, "float16", False, True),
        (4096, "float32", False, True),
        (4097, "float16", False, False),  # rows not 16-byte aligned: element accesses
        (1000, "float32", True, False),
    ]
    for hidden, dtype, strided, vectorized in cases:
        source = module["kernel_source"](hidden, dtype, strided)
        assert "__global__" in source, (hidden, dtype)
        wide_loads = re.search(r"\*\((?:uint4|float4)\*\)\(x \+", source) is not None
        assert wide_loads == vectorized, (hidden, dtype, strided)
        assert ("x_stride" in source) == strided, (hidden, dtype, strided)


@pytest.mark.gpu
@pytest.mark.parametrize("suffix", SUFFIXES)
def test_gpu_every_workload(suffix):
    _tilelang_or_skip()
    assert check_every_workload(f"{NAME}_{suffix}", "tilelang") >= 10
