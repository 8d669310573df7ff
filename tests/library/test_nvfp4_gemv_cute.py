"""nvfp4_gemv in CuTe (CUTLASS C++ headers, spec.dependencies ["cutlass"]). On a CPU: compiled by
the project's build path for sm_90a (nothing launched), with the pinned nvidia-cutlass headers
or, where that package is absent, the CUTLASS tree FlashInfer bundles (KERNELARENA_CUTLASS_DIR).
On the GPU (marked ``gpu``): every workload of the definition against the reference, and a's
layout checked rather than misread."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest
import torch

from kernelarena.compile import DependencyMissing
from kernelarena.compile.headers import CUTLASS_OVERRIDE
from kernelarena.testing import build, check_every_workload

NAME = "nvfp4_gemv"


@pytest.fixture
def cutlass(monkeypatch: pytest.MonkeyPatch) -> None:
    """The pinned headers when installed, else FlashInfer's copy, else a skip naming the extra."""
    if importlib.util.find_spec("cutlass_library") is not None:
        return
    spec = importlib.util.find_spec("flashinfer")
    root = (
        Path(next(iter(spec.submodule_search_locations))) / "data" / "cutlass"
        if spec is not None and spec.submodule_search_locations
        else None
    )
    if root is None or not (root / "include" / "cute" / "tensor.hpp").is_file():
        pytest.skip("no CUTLASS headers: pip install 'kernelarena[cute]'")
    monkeypatch.setenv(CUTLASS_OVERRIDE, str(root))


@pytest.mark.timeout(900)
def test_cute_compiles_for_sm90a(cutlass: None) -> None:
    solution = build(NAME, "cute", "cpu")
    assert solution.metadata["arch"] == "sm_90a"
    assert solution.solution.spec.dependencies == ["cutlass"]


def test_without_headers_the_build_names_the_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(CUTLASS_OVERRIDE, raising=False)
    real = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util, "find_spec", lambda n, *a: None if n == "cutlass_library" else real(n, *a)
    )
    with pytest.raises(DependencyMissing, match=r"kernelarena\[cute\]"):
        build(NAME, "cute", "cpu")


@pytest.mark.gpu
def test_gpu_every_workload(cutlass: None) -> None:
    assert check_every_workload(NAME, "cute") >= 20


@pytest.mark.gpu
def test_gpu_rejects_a_not_contiguous_along_k(cutlass: None) -> None:
    solution = build(NAME, "cute", "cuda")
    m, k, batches = 128, 256, 2
    a = torch.zeros(m, k // 2, batches, dtype=torch.uint8, device="cuda").view(
        torch.float4_e2m1fn_x2
    )
    b = torch.zeros(1, k // 2, batches, dtype=torch.uint8, device="cuda").view(
        torch.float4_e2m1fn_x2
    )
    sfa = torch.zeros(m, k // 16, batches, device="cuda").to(torch.float8_e4m3fn)
    sfb = torch.zeros(1, k // 16, batches, device="cuda").to(torch.float8_e4m3fn)
    c = torch.empty(m, 1, batches, dtype=torch.float16, device="cuda")
    with pytest.raises(Exception, match="contiguous along k"):
        solution(a, b, sfa, sfb, sfa, sfb, c)
