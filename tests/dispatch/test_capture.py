"""Capture safety, on a CPU: capture is played by replacing torch's capture query (and apply's
per-call one, which a CPU tensor never asks). The first eager call of a key warms the winner
inside graphs on copies; a key first reached inside a capture builds, tunes and loads nothing,
runs what is safe there and says so once."""

from __future__ import annotations

import dataclasses
import warnings
from typing import Any

import pytest
import torch

import kernelarena
from kernelarena.dispatch import calls
from kernelarena.dispatch.ops import make_operator
from kernelarena.dispatch.runtime import ApplyWarning
from kernelarena.testing import assert_close
from tests.dispatch.test_ranking import GPU_FAST, LAUNCH_FAST, TOY, measured


@kernelarena.apply("toy")
def toy(x: torch.Tensor, factor: float) -> torch.Tensor:
    return torch.full_like(x, -1)


@kernelarena.apply("toy")
def other_toy(x: torch.Tensor, factor: float) -> torch.Tensor:
    return torch.full_like(x, -1)


@pytest.fixture
def capture(monkeypatch: pytest.MonkeyPatch) -> list[bool]:
    """Set ``capture[0] = True`` to be inside a (played) CUDA graph capture."""
    state = [False]
    monkeypatch.setattr(torch.cuda, "is_initialized", lambda: True)
    monkeypatch.setattr(torch.cuda, "is_current_stream_capturing", lambda: state[0])
    monkeypatch.setattr(calls, "capture_check", lambda device: lambda: state[0])
    return state


def counted(runtime: Any, names: list[str]) -> list[tuple[str, torch.Tensor, torch.Tensor]]:
    """Build ``names`` into ``runtime`` with their calls recorded: (solution, input, output)."""
    ran: list[tuple[str, torch.Tensor, torch.Tensor]] = []
    for name in names:
        built = runtime.runnable(TOY, name, torch.device("cpu"))

        def record(*args: Any, _fn: Any = built.fn, _name: str = name) -> Any:
            ran.append((_name, args[0], args[-1]))
            return _fn(*args)

        runtime._runnables[(name, "cpu")] = dataclasses.replace(built, fn=record)
    return ran


def refuse_slow_work(runtime: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """From now on, loading a table or building a solution fails the test."""

    def refused(*args: Any, **kwargs: Any) -> Any:
        raise AssertionError("a table or a build inside a capture")

    monkeypatch.setattr(runtime, "table", refused)
    monkeypatch.setattr(runtime, "runnable", refused)


def test_the_first_eager_call_warms_the_winner_inside_graphs(
    capture: list[bool], monkeypatch: pytest.MonkeyPatch
) -> None:
    """At 4 x 8 LAUNCH_FAST wins eagerly and GPU_FAST in graphs: the first eager call runs
    GPU_FAST once (on x, which it only reads, into an output of its own), then LAUNCH_FAST for
    the caller; a capture then runs GPU_FAST with nothing built, tuned or tried."""
    runtime = kernelarena.enable_apply(measured())
    ran = counted(runtime, [GPU_FAST.name, LAUNCH_FAST.name])
    x = torch.randn(4, 8)
    pristine = x.clone()
    result = toy(x, 2.0)
    assert result.eq(2).all() and torch.equal(x, pristine)
    assert [name for name, _, _ in ran] == [GPU_FAST.name, LAUNCH_FAST.name]
    (_, warm_input, warm_output), (_, _, caller_output) = ran
    assert warm_input is x and caller_output is result and warm_output is not result
    refuse_slow_work(runtime, monkeypatch)
    capture[0] = True
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert toy(x, 2.0).eq(1).all()
    assert [name for name, _, _ in ran[2:]] == [GPU_FAST.name]
    capture[0] = False
    assert toy(x, 2.0).eq(2).all()


def test_a_key_first_reached_inside_a_capture_runs_the_body_and_stays_unresolved(
    capture: list[bool], monkeypatch: pytest.MonkeyPatch
) -> None:
    runtime = kernelarena.enable_apply(measured())
    assert toy(torch.randn(4, 8), 2.0).eq(2).all()  # another key, resolved eagerly
    tables, built = runtime.table, runtime.runnable
    refuse_slow_work(runtime, monkeypatch)
    capture[0] = True
    x = torch.randn(64, 8)
    with pytest.warns(
        ApplyWarning,
        match=r"toy_fp32 at \{'rows': 64, 'cols': 8\}: its first call is inside CUDA graph capture",
    ) as caught:
        assert toy(x, 2.0).eq(-1).all()
    assert "the decorated function's body" in str(caught[0].message)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # said once per key
        assert toy(x, 2.0).eq(-1).all()
    site = toy.__kernelarena_site__  # type: ignore[attr-defined]
    assert site.key_of((x, 2.0)) not in site.entries
    capture[0] = False
    monkeypatch.setattr(runtime, "table", tables)
    monkeypatch.setattr(runtime, "runnable", built)
    assert toy(x, 2.0).eq(1).all()  # resolved now, outside the capture: GPU_FAST wins both ways
    assert site.key_of((x, 2.0)) in site.entries


def test_a_capture_runs_a_winner_another_call_site_tried_at_that_key(
    capture: list[bool], monkeypatch: pytest.MonkeyPatch
) -> None:
    runtime = kernelarena.enable_apply(measured())
    x = torch.randn(4, 8)
    assert toy(x, 2.0).eq(2).all()  # tries GPU_FAST (warm) and LAUNCH_FAST at 4 x 8
    refuse_slow_work(runtime, monkeypatch)
    capture[0] = True
    with pytest.warns(ApplyWarning, match=f"running {GPU_FAST.name}, tried at this key already"):
        assert other_toy(x, 2.0).eq(1).all()


def test_an_operator_inside_a_capture_runs_the_reference_when_nothing_is_built(
    capture: list[bool], monkeypatch: pytest.MonkeyPatch
) -> None:
    """An operator's fallback is its default solution, which would have to be built: inside a
    capture it is the definition's reference instead (here x * factor)."""
    runtime = kernelarena.enable_apply(measured())
    operator = make_operator("toy_captured", [TOY], namespace="kernelarena_capture_test")
    refuse_slow_work(runtime, monkeypatch)
    capture[0] = True
    x = torch.randn(16, 8)
    with pytest.warns(ApplyWarning, match="running the definition's reference"):
        assert_close(operator(x, 1.5), x * 1.5, 1e-6, 1e-6)
