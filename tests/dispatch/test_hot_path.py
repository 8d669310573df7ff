"""A call after a key's first, through apply, both ways: the compiled hot path (``FastCall``) and
the Python wrapper (``KERNELARENA_APPLY_FASTPATH=0``). Each test decorates its functions itself,
so that the ``hot_path`` fixture decides which they get.

Runtime: ONE (destination-passing, fills 1) wins 4 x 8, TWO (value-returning, fills 2) 16 x 8."""

from __future__ import annotations

import functools
import inspect
import sys
from collections.abc import Callable
from typing import Any

import pytest
import torch

import kernelarena
from kernelarena.data import BuildSpec, Solution, SourceFile
from kernelarena.dispatch import fastcall
from tests.dispatch.toys import add, marker, timed, toy_definition, toy_set, workload

TOY = toy_definition()
ONE, TWO = marker(TOY, 1), marker(TOY, 2, dps=False)
Decorate = Callable[[Callable[..., Any]], Any]


def enable(*winners: Solution) -> Any:
    """ONE wins 4 x 8 and TWO 16 x 8, or ``winners`` (in order) win 4 x 8."""
    four, sixteen = workload(TOY, rows=4, cols=8), workload(TOY, rows=16, cols=8)
    if winners:
        trace_set = toy_set(TOY, solutions=list(winners))
        add(trace_set, *(timed(TOY, s, four, 1.0 + i) for i, s in enumerate(winners)))
        return kernelarena.enable_apply(trace_set)
    trace_set = toy_set(TOY, solutions=[ONE, TWO])
    add(trace_set, timed(TOY, ONE, four, 1.0), timed(TOY, TWO, four, 5.0))
    add(trace_set, timed(TOY, ONE, sixteen, 5.0), timed(TOY, TWO, sixteen, 1.0))
    return kernelarena.enable_apply(trace_set)


def solution(name: str, source: str, dps: bool = True) -> Solution:
    spec = BuildSpec(
        language="python",
        target_hardware=["cpu"],
        entry_point="s.py::run",
        destination_passing_style=dps,
    )
    return Solution(
        name=name,
        definition=TOY.name,
        author="tests",
        spec=spec,
        sources=[SourceFile(path="s.py", content=source)],
    )


@pytest.fixture(params=["compiled", "python"])
def hot_path(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> Decorate:
    """``apply("toy")`` with the hot path of the parameter."""
    if request.param == "python":
        monkeypatch.setenv("KERNELARENA_APPLY_FASTPATH", "0")
    elif fastcall.module() is None:
        pytest.skip(f"apply: {fastcall.status()}")
    else:
        monkeypatch.delenv("KERNELARENA_APPLY_FASTPATH", raising=False)

    def decorate(body: Callable[..., Any]) -> Any:
        routed = kernelarena.apply("toy")(body)
        assert (routed.__kernelarena_site__.fast is not None) == (request.param == "compiled")
        return routed

    return decorate


def test_the_decorated_function_keeps_the_body_s_name_signature_and_site(
    hot_path: Decorate,
) -> None:
    def scaled(x: torch.Tensor, factor: float = 2.0) -> torch.Tensor:
        """Scaled by factor."""
        return x * factor

    routed = hot_path(scaled)
    assert routed.__name__ == "scaled" and routed.__doc__ == "Scaled by factor."
    assert routed.__qualname__ == scaled.__qualname__ and routed.__module__ == __name__
    assert routed.__wrapped__ is scaled and inspect.signature(routed) == inspect.signature(scaled)
    assert routed.__kernelarena_site__.fallback is scaled


def test_every_calling_style_after_the_first_call(hot_path: Decorate) -> None:
    enable()
    routed = hot_path(lambda x, factor=2.0, out=None: torch.full_like(x, -1))
    x, out, big = torch.zeros(4, 8), torch.empty(4, 8), torch.zeros(16, 8)
    for _ in range(3):  # the first call of a key, the one that makes its guard, the guard's
        assert routed(x, 1.5, out) is out and out.eq(1).all()
        fresh = routed(x, 1.5)
        assert fresh.eq(1).all() and fresh.is_contiguous() and fresh.data_ptr() != x.data_ptr()
        assert routed(x, factor=1.5).eq(1).all() and routed(x).eq(1).all()
        assert routed(x=x).eq(1).all() and routed(big, 1.5).eq(2).all()
    kernelarena.disable_apply()
    assert routed(x, 1.5).eq(-1).all() and routed(x, factor=1.5).eq(-1).all()


def test_keyword_calls_of_a_known_form_skip_python(
    hot_path: Decorate, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Compiled: after a form's first call, its calls are made positional in C, so the site's
    binder is never asked again; the Python wrapper asks it every call."""
    enable()
    routed = hot_path(lambda x, factor=2.0: torch.full_like(x, -1))
    site, x = routed.__kernelarena_site__, torch.zeros(4, 8)
    for _ in range(2):
        routed(x, factor=1.5), routed(x)
    asked: list[Any] = []
    real = site.positional
    monkeypatch.setattr(site, "positional", lambda *a: asked.append(a) or real(*a))
    for _ in range(3):
        assert routed(x, factor=1.5).eq(1).all() and routed(x).eq(1).all()
    assert len(asked) == (0 if site.fast is not None else 6)


def test_references_are_returned_as_taken(hot_path: Decorate) -> None:
    """100,000 calls of each style leave every argument, default, result and prepared callable
    with the references it had (a leak or a missing reference in C would show here)."""
    enable()
    default = float("2.5")  # an object of its own, not a cached constant
    routed = hot_path(lambda x, factor=default, out=None: torch.full_like(x, -1))
    x, out, big, factor = torch.zeros(4, 8), torch.empty(4, 8), torch.zeros(16, 8), float("1.5")
    calls: dict[str, Callable[[], Any]] = {
        "into": lambda: routed(x, factor, out),
        "allocated": lambda: routed(x, factor),
        "keyword": lambda: routed(x, factor=factor),
        "default": lambda: routed(x),
        "result": lambda: routed(big, factor),
    }
    site = routed.__kernelarena_site__
    for name, call in calls.items():
        for _ in range(3):
            call()
        held = [x, out, big, factor, default, site.guards.hit[2], site.guards.hit[3]]
        before = [sys.getrefcount(o) for o in held]
        for _ in range(100_000):
            call()
        assert [sys.getrefcount(o) for o in held] == before, name
        result = call()  # a new tensor only we hold, or ``out`` (counted in ``held`` above)
        assert result is out or sys.getrefcount(result) == 2, name
        del result


RAISES_INTO = solution("toy_fp32_raises_into", "def run(x, factor, out):\n    raise KeyError(7)\n")
RAISES = solution("toy_fp32_raises", "def run(x, factor):\n    raise KeyError(7)\n", dps=False)


@pytest.mark.parametrize("winner", [RAISES_INTO, RAISES], ids=["dps", "value"])
def test_exceptions_of_the_solution_reach_the_caller(hot_path: Decorate, winner: Solution) -> None:
    enable(winner)
    routed = hot_path(lambda x, factor, out=None: x)
    x, out = torch.zeros(4, 8), torch.empty(4, 8)
    for _ in range(3):
        with pytest.raises(KeyError, match="7"):
            routed(x, 1.5)
        with pytest.raises(KeyError, match="7"):
            routed(x, 1.5, out)
    assert sys.getrefcount(out) == 2


def test_a_guard_that_raises_propagates(hot_path: Decorate) -> None:
    enable()
    routed = hot_path(lambda x, factor: x)
    x = torch.zeros(4, 8)
    routed(x, 1.5), routed(x, 1.5)
    guards = routed.__kernelarena_site__.guards
    count, _, _, call, into = guards.hit

    def broken(*tensors: Any) -> bool:
        raise RuntimeError("the guard broke")

    guards._ask_first(count, (broken, (call, into)))
    with pytest.raises(RuntimeError, match="the guard broke"):
        routed(x, 1.5)


@pytest.mark.parametrize("during", ["check", "call"])
def test_a_reset_during_a_call_lets_the_call_finish(hot_path: Decorate, during: str) -> None:
    """The guard or the prepared call turns apply off while it runs: the site forgets the slot
    and guards that held the only references to both; the call still returns the winner's
    result, and the next one runs the body."""
    enable()
    routed = hot_path(lambda x, factor: torch.full_like(x, -1))
    x = torch.zeros(4, 8)
    routed(x, 1.5), routed(x, 1.5)
    guards = routed.__kernelarena_site__.guards
    count, _, check, call, into = guards.hit

    def resetting(real: Callable[..., Any], *args: Any) -> Any:
        kernelarena.disable_apply()
        return real(*args)

    if during == "check":
        guards._ask_first(count, (functools.partial(resetting, check), (call, into)))
    else:
        guards._ask_first(count, (check, (functools.partial(resetting, call), into)))
    del guards, check, call
    assert routed(x, 1.5).eq(1).all()
    assert routed(x, 1.5).eq(-1).all()


def test_a_decorated_function_is_a_method_on_a_class(hot_path: Decorate) -> None:
    def body(self: Any, x: torch.Tensor, factor: float) -> Any:
        return self, x

    class Holder:
        method = hot_path(body)

    holder, x = Holder(), torch.zeros(4, 8)
    assert holder.method(x, 1.5) == (holder, x)  # apply off: the body, given the instance
    assert inspect.ismethod(holder.method) and Holder.__dict__["method"] is Holder.method


@kernelarena.apply("toy")
def module_level(x: torch.Tensor, factor: float) -> torch.Tensor:
    return x


def test_a_decorated_function_pickles_by_name_and_is_collected_when_dropped() -> None:
    import copy
    import gc
    import pickle
    import weakref

    assert pickle.loads(pickle.dumps(module_level)) is module_level
    assert copy.deepcopy(module_level) is module_level
    assert "module_level" in repr(module_level)
    enable()

    def local(x: torch.Tensor, factor: float) -> torch.Tensor:
        return x

    routed = kernelarena.apply("toy")(local)
    routed(torch.zeros(4, 8), 1.5), routed(torch.zeros(4, 8), 1.5)
    site = weakref.ref(routed.__kernelarena_site__)
    del routed
    gc.collect()
    assert site() is None  # the site and its function refer to each other: a cycle, collected
