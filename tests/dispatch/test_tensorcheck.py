"""The compiled guard of a key's tensors (``dispatch/_tensorcheck.cpp``): it must pass exactly
where torch's ``TensorGuards`` passes, on every call below, and refuse what it cannot read."""

from __future__ import annotations

import gc
import weakref
from collections.abc import Callable
from typing import Any

import pytest
import torch

from kernelarena.dispatch import fastcall, tensorcheck
from kernelarena.dispatch.signature import tensor_guard

COMPILED = tensorcheck.module() if fastcall.wanted() else None
needs_compiled = pytest.mark.skipif(COMPILED is None, reason=tensorcheck.status())


def torch_guard(tensors: list[torch.Tensor]) -> Callable[..., bool]:
    from torch._C._dynamo.guards import TensorGuards

    sizes: Any = [list(t.shape) for t in tensors]
    strides: Any = [list(t.stride()) for t in tensors]
    guard = TensorGuards(*tensors, dynamic_dims_sizes=sizes, dynamic_dims_strides=strides)
    return guard.check  # type: ignore[no-any-return]


def calls(x: torch.Tensor, w: torch.Tensor) -> list[tuple[torch.Tensor, ...]]:
    return [
        (x, w),
        (torch.randn(4, 8), torch.zeros(8)),
        (torch.randn(64, 8), w),
        (torch.randn(4, 9), w),
        (x.double(), w),
        (x.half(), w),
        (torch.randn(8, 4).t(), w),
        (x[:, ::2].repeat(1, 2), w),
        (torch.randn(4, 16)[:, ::2], w),
        (w, x),
        (x, x),
        (x, x[0]),
        (torch.randn(4, 8, requires_grad=True), w),
        (torch.nn.Parameter(torch.randn(4, 8)), w),
        (x.unsqueeze(0), w),
        (torch.randn(4, 8, dtype=torch.complex64).conj(), w),
        (x, w.to_sparse()),
        (torch.randn(4, 8).to("meta"), w),
    ]


@needs_compiled
def test_it_passes_exactly_where_torch_s_guard_passes() -> None:
    x, w = torch.randn(4, 8), torch.randn(8)
    ours, theirs = tensor_guard([x, w]), torch_guard([x, w])
    assert isinstance(ours, COMPILED.TensorCheck)  # type: ignore[union-attr]
    for args in calls(x, w):
        assert ours(*args) == theirs(*args), [(a.shape, a.dtype, a.stride()) for a in args]


@needs_compiled
@pytest.mark.parametrize("mode", ["inference_mode", "no_grad", "enable_grad"])
def test_the_thread_s_dispatch_state_counts_as_it_does_for_torch(mode: str) -> None:
    x, w = torch.randn(4, 8), torch.randn(8, requires_grad=True)
    outside = [tensor_guard([x, w]), torch_guard([x, w])]
    with getattr(torch, mode)():
        inside = [tensor_guard([x, w]), torch_guard([x, w])]
        made = [torch.randn(4, 8), torch.randn(8)]
        assert outside[0](x, w) == outside[1](x, w)
        assert inside[0](*made) == inside[1](*made)
    assert inside[0](x, w) == inside[1](x, w)


@needs_compiled
def test_it_refuses_what_it_cannot_read_and_torch_s_guard_stands_in() -> None:
    sparse = torch.randn(4, 8).to_sparse()
    with pytest.raises(ValueError):
        COMPILED.TensorCheck(sparse)  # type: ignore[union-attr]
    with pytest.raises(ValueError):
        COMPILED.TensorCheck(object())  # type: ignore[union-attr]
    assert tensorcheck.tensor_check([sparse]) is None
    many = torch.zeros([1] * 13)
    assert tensorcheck.tensor_check([many]) is None
    assert tensor_guard([many])(many)  # torch's


@needs_compiled
def test_wrong_counts_raise_and_no_tensor_is_kept_alive() -> None:
    x = torch.randn(1000)
    alive = weakref.ref(x)
    check = COMPILED.TensorCheck(x)  # type: ignore[union-attr]
    with pytest.raises(TypeError):
        check(x, x)
    with pytest.raises(TypeError):
        check(tensor=x)
    del x
    gc.collect()
    assert alive() is None and not check(torch.randn(999)) and check(torch.randn(1000))


def test_the_python_hot_path_keeps_torch_s_guard(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("KERNELARENA_APPLY_FASTPATH", "0")
    assert tensorcheck.tensor_check([torch.randn(2)]) is None
    assert tensorcheck.status().startswith("torch's TensorGuards")
