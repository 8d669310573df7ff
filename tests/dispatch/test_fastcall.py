"""The compiled hot path itself (``dispatch/_fastcall.c``) and how it is built or refused.

``FastCall`` is driven here with plain Python callables standing for torch's guard check, the
prepared call and ``torch.empty_like``, so every branch of the C code is reached by name; the
same paths through apply are in ``test_hot_path.py``."""

from __future__ import annotations

import inspect
import stat
from pathlib import Path
from typing import Any

import pytest

import kernelarena
from kernelarena.dispatch import fastcall

COMPILED = fastcall.module()
needs_compiled = pytest.mark.skipif(COMPILED is None, reason=f"apply: {fastcall.status()}")


class Recorder:
    """A callable that records its calls and returns ``result`` (or what ``answer`` returns)."""

    def __init__(self, result: Any = None, answer: Any = None) -> None:
        self.calls: list[tuple[tuple[Any, ...], dict[str, Any]]] = []
        self.result, self.answer = result, answer

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        self.calls.append((args, kwargs))
        return self.answer(*args, **kwargs) if self.answer else self.result


def fast_call(arity: int = 0) -> tuple[Any, Recorder, Recorder]:
    slow, body = Recorder("slow"), Recorder("body")
    assert COMPILED is not None
    return COMPILED.FastCall(slow, body, arity), slow, body


def guarded(fast: Any, count: int, positions: list[int], call: Any, into: int) -> Any:
    slot = COMPILED.HitSlot()  # type: ignore[union-attr]
    passes = Recorder(answer=lambda *tensors: tensors[0] != "refused")
    assert slot.set(count, positions, passes, call, into)
    fast.slot = slot
    return passes


@needs_compiled
def test_a_call_the_guard_passes_runs_the_prepared_call_as_into_says() -> None:
    fast, slow, _ = fast_call()
    call = Recorder("result")
    check = guarded(fast, 3, [0, 2], call, -1)
    assert fast("a", 1.5, "c") == "result"
    assert check.calls == [(("a", "c"), {})] and call.calls == [(("a", 1.5, "c"), {})]
    guarded(fast, 3, [0], call, 2)  # destination-passing: the argument written is returned
    assert fast("a", 1.5, "out") == "out"
    fast.empty_like = Recorder(answer=lambda like, memory_format: ("new", like, memory_format))
    fast.memory_format = "contiguous"
    guarded(fast, 2, [0], call, -2 - 0)  # allocated like argument 0, passed last, returned
    assert fast("x", 2.0) == ("new", "x", "contiguous")
    assert call.calls[-1] == (("x", 2.0, ("new", "x", "contiguous")), {})
    assert slow.calls == []


@needs_compiled
def test_every_other_call_goes_to_the_python_wrapper_with_its_arguments() -> None:
    fast, slow, body = fast_call()
    assert fast("a", 1) == "slow"  # no slot yet
    guarded(fast, 2, [0], Recorder("result"), -1)
    assert fast("a") == "slow"  # another count
    assert fast("refused", 1) == "slow"  # the guard fails
    assert fast("a", b=1) == "slow"  # keywords of a form not known
    assert slow.calls == [(("a", 1), {}), (("a",), {}), (("refused", 1), {}), (("a",), {"b": 1})]
    fast.passthrough = True
    assert fast("a", b=1) == "body" and body.calls == [(("a",), {"b": 1})]


@needs_compiled
def test_keyword_and_default_forms_are_made_positional() -> None:
    fast, slow, _ = fast_call(arity=3)
    call = Recorder(answer=lambda *args: args)
    guarded(fast, 3, [0], call, -1)
    # f(x, factor=..., out=...) and f(x) with factor defaulting: slots, then -1 - k for default k.
    assert fast.add_form(1, ("factor", "out"), (0, 1, 2), ())
    assert fast.add_form(1, (), (0, -1, -2), ("default", "out_default"))
    assert not fast.add_form(1, (), (0, -1, -2), ("again", "again"))  # known already
    assert fast("x", factor=2.0, out="o") == ("x", 2.0, "o")
    assert fast("x", out="o", factor=2.0) == "slow"  # another order is another form
    assert fast("x") == ("x", "default", "out_default")
    assert fast.forms == 2 and len(slow.calls) == 1
    with pytest.raises(ValueError, match="out of range"):
        fast.add_form(0, ("a",), (1,), ())


@needs_compiled
def test_errors_of_the_guard_and_of_the_call_propagate() -> None:
    fast, slow, _ = fast_call()

    def broken(*args: Any) -> Any:
        raise KeyError("broke")

    slot = COMPILED.HitSlot()  # type: ignore[union-attr]
    slot.set(1, [0], broken, Recorder("never"), -1)
    fast.slot = slot
    with pytest.raises(KeyError, match="broke"):
        fast("a")
    fast.empty_like, fast.memory_format = Recorder("out"), "contiguous"
    for into in (-1, 0, -2):
        guarded(fast, 1, [0], broken, into)
        with pytest.raises(KeyError, match="broke"):
            fast("a")
    assert slow.calls == []


@needs_compiled
def test_a_slot_refuses_what_it_cannot_hold_and_leaves_those_calls_to_python() -> None:
    slot = COMPILED.HitSlot()  # type: ignore[union-attr]
    assert not slot.set(40, [0], len, len, -1)  # more arguments than the C path takes
    assert not slot.set(2, [2], len, len, -1)  # a position past the count
    assert not slot.set(2, [0], len, len, -4)  # allocated like argument 2 of 2
    assert slot.count == -1 and slot.check is None
    assert slot.set(2, (1,), len, len, 0) and slot.positions == (1,) and slot.into == 0
    slot.clear()
    assert slot.count == -1 and slot.call is None
    fast, _, _ = fast_call()
    with pytest.raises(TypeError, match="HitSlot"):
        fast.slot = "not a slot"


@needs_compiled
def test_a_fastcall_binds_as_a_method_and_keeps_its_attributes() -> None:
    fast, _, body = fast_call()
    fast.passthrough = True
    fast.__doc__, fast.note = "documented", 1

    class Holder:
        method = fast

    holder = Holder()
    assert holder.method(2) == "body" and body.calls == [((holder, 2), {})]
    assert Holder.method is fast and inspect.ismethod(holder.method)
    assert fast.__doc__ == "documented" and fast.__dict__["note"] == 1


def test_the_environment_variable_asks_for_the_python_wrapper(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("KERNELARENA_APPLY_FASTPATH", "0")
    assert fastcall.status() == "Python (KERNELARENA_APPLY_FASTPATH=0)"

    def body(x: Any, factor: float) -> Any:
        return x

    assert inspect.isfunction(kernelarena.apply("toy")(body))


def failing_compiler(folder: Path) -> tuple[Path, Path]:
    """A compiler that says it failed, and the log of its runs."""
    runs, compiler = folder / "runs", folder / "cc"
    compiler.write_text(
        f"#!/bin/sh\necho run >> {runs}\necho '_fastcall.c:1:1: error: simulated' >&2\nexit 1\n"
    )
    compiler.chmod(compiler.stat().st_mode | stat.S_IEXEC)
    return compiler, runs


def test_a_failing_compiler_leaves_the_python_wrapper_and_says_why(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    compiler, runs = failing_compiler(tmp_path)
    monkeypatch.setenv("KERNELARENA_CACHE", str(tmp_path / "cache"))
    monkeypatch.setenv("CC", str(compiler))
    module, why = fastcall.build_and_load()
    assert module is None and "cc failed: _fastcall.c:1:1: error: simulated" in why
    module, again = fastcall.build_and_load()  # kept: not compiled again
    assert module is None and "kept from before" in again
    monkeypatch.setenv("KERNELARENA_RETRY_FAILED_BUILDS", "1")
    fastcall.build_and_load()
    assert runs.read_text().split() == ["run", "run"]
    monkeypatch.setattr(fastcall._once, "loaded", (None, why))  # as in a process where it failed
    monkeypatch.delenv("KERNELARENA_APPLY_FASTPATH", raising=False)  # pytest --apply-fastpath
    assert fastcall.status() == f"Python ({why})"

    def body(x: Any, factor: float) -> Any:
        return x

    routed = kernelarena.apply("toy")(body)
    assert inspect.isfunction(routed) and routed.__kernelarena_site__.fast is None  # type: ignore[attr-defined]


def test_cc_may_name_a_launcher_before_the_compiler(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    compiler, _ = failing_compiler(tmp_path)
    monkeypatch.setenv("CC", f"env {compiler}")
    assert fastcall._compiler() == [fastcall.shutil.which("env"), str(compiler)]


def test_no_compiler_leaves_the_python_wrapper(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("CC", raising=False)
    monkeypatch.setenv("PATH", str(tmp_path))
    assert fastcall.build_and_load() == (None, "no C compiler: $CC, cc and gcc not found")


@needs_compiled
def test_the_library_is_built_once_per_key_then_found(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("KERNELARENA_CACHE", str(tmp_path))
    compiler = fastcall._compiler()
    assert compiler is not None
    include = Path(fastcall.sysconfig.get_paths()["include"])
    library = fastcall._built(compiler, include)
    assert library.parent.parent == tmp_path / "build" / "fastcall"
    assert [p.name for p in library.parent.iterdir() if "partial" in p.name] == []
    monkeypatch.setattr(fastcall, "_compile", lambda *a: pytest.fail("compiled again"))
    assert fastcall._built(compiler, include) == library
    assert fastcall._import(library).FastCall.__name__ == "FastCall"
