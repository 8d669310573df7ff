"""The hot path's guard: a key's tensors checked in one C++ call, before its key is read.

Every call below must return what the key path would: a guard passes only for the key it was made
for (same dtypes, sizes and strides), and any other call falls back to reading the key."""

from __future__ import annotations

import inspect
from typing import Any

import pytest
import torch

import kernelarena
from kernelarena.dispatch.signature import ApplyArgumentError, tensor_guard
from tests.dispatch.test_ranking import measured  # eager winners: 2 at 4 x 8, 1 at 64 x 8


@kernelarena.apply("toy")
def toy(x: torch.Tensor, factor: float) -> torch.Tensor:
    return torch.full_like(x, -1)


def test_a_guard_passes_only_for_the_dtypes_sizes_and_strides_it_was_made_for() -> None:
    x, w = torch.randn(4, 8), torch.randn(8)
    check = tensor_guard([x, w])
    assert check(x, w) and check(torch.randn(4, 8), torch.zeros(8))
    assert not check(torch.randn(64, 8), w)  # another size
    assert not check(x.double(), w)  # another dtype
    assert not check(torch.randn(8, 4).t(), w)  # the same shape, other strides
    assert not check(w, x)


def test_alternating_shapes_each_get_their_own_winner() -> None:
    """4 x 8 runs LAUNCH_FAST (2), 64 x 8 GPU_FAST (1); a transposed input falls back to the key,
    and a dtype no definition takes is still refused, never let through by the last guard."""
    kernelarena.enable_apply(measured())
    small, large = torch.zeros(4, 8), torch.zeros(64, 8)
    for _ in range(3):
        assert toy(small, 2.0).eq(2).all()
        assert toy(large, 2.0).eq(1).all()
        assert toy(torch.zeros(8, 4).t(), 2.0).eq(2).all()  # same key as small, other strides
    with pytest.raises(ApplyArgumentError, match=r"dtype torch\.float64"):
        toy(small.double(), 2.0)
    assert toy(small, 2.0).eq(2).all()


def test_the_key_path_and_the_guard_agree_on_every_call() -> None:
    kernelarena.enable_apply(measured())
    small, large = torch.zeros(4, 8), torch.zeros(64, 8)
    toy(small, 2.0)
    toy(large, 2.0)
    site = toy.__kernelarena_site__  # type: ignore[attr-defined]
    for args in [(small, 2.0), (large, 3.0), (small, 1.0), (large, 2.0)]:
        assert site.lookup(args) is site.entries[site.key_of(args)]


def test_a_guard_keeps_no_tensor_alive() -> None:
    import gc
    import weakref

    x = torch.randn(1000)
    alive = weakref.ref(x)
    check = tensor_guard([x])
    del x
    gc.collect()
    assert alive() is None and not check(torch.randn(999))


@kernelarena.apply("toy")
def toy_default(x: torch.Tensor, factor: float = 2.0) -> torch.Tensor:
    return torch.full_like(x, -1)


def _guard_passes(site: Any, args: tuple[Any, ...]) -> bool:
    count, pick, check, _, _ = site.guards.hit
    return len(args) == count and bool(check(*pick(args)))


def test_calls_inside_inference_mode_get_a_guard_of_their_own() -> None:
    """A guard made outside inference mode never passes inside it (the dispatch keys differ):
    the key's second miss in a row makes one that does, so the key is read no more."""
    kernelarena.enable_apply(measured())
    small = torch.randn(4, 8)
    assert toy(small, 2.0).eq(2).all()
    site = toy.__kernelarena_site__  # type: ignore[attr-defined]
    with torch.inference_mode():
        for _ in range(3):
            assert toy(small, 2.0).eq(2).all()
        assert _guard_passes(site, (small, 2.0))
    assert toy(torch.randn(64, 8), 2.0).eq(1).all()
    assert toy(small, 2.0).eq(2).all()
    assert len(site.entries) == 2


def test_keyword_and_default_calls_bind_once_per_form(monkeypatch: pytest.MonkeyPatch) -> None:
    """``Signature.bind`` runs once per form of call (keywords given, defaults left out), after
    which such a call is a tuple built by compiled code and the guard."""
    kernelarena.enable_apply(measured())
    binds: list[tuple[int, tuple[str, ...]]] = []
    real_bind = inspect.Signature.bind
    site = toy_default.__kernelarena_site__  # type: ignore[attr-defined]

    def counted(self: inspect.Signature, *args: Any, **kwargs: Any) -> Any:
        if self is site.signature:  # not the builds' checks of solutions' signatures
            binds.append((len(args), tuple(kwargs)))
        return real_bind(self, *args, **kwargs)

    monkeypatch.setattr(inspect.Signature, "bind", counted)
    small, large = torch.randn(4, 8), torch.randn(64, 8)
    for _ in range(4):
        assert toy_default(small).eq(2).all()
        assert toy_default(large, factor=3.0).eq(1).all()
        assert toy_default(x=small).eq(2).all()
        assert toy_default(small, 2.0).eq(2).all()
    assert binds == [(1, ()), (1, ("factor",)), (0, ("x",))]  # the positional call: none
    with pytest.raises(TypeError, match=r"toy_default \(apply 'toy'\): got an unexpected"):
        toy_default(small, scale=2.0)
