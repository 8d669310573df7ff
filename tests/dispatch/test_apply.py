"""apply(): the winner per shape in both calling styles, argument errors, off and on, threads."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import pytest
import torch

import kernelarena
from kernelarena.dispatch import runtime as runtime_module
from kernelarena.dispatch import state
from kernelarena.dispatch.signature import ApplyArgumentError
from tests.dispatch.toys import (
    add,
    inplace_definition,
    inplace_solution,
    marker,
    timed,
    toy_definition,
    toy_set,
    workload,
)

TOY, TOY_BF16 = toy_definition(), toy_definition("bfloat16", "bf16")
ONE, TWO = marker(TOY, 1), marker(TOY, 2, dps=False)


def toy_runtime() -> Any:
    """ONE (destination-passing) wins 4 x 8, TWO (value-returning) wins 16 x 8; bf16 unmeasured."""
    trace_set = toy_set(TOY, TOY_BF16, solutions=[ONE, TWO])
    four, sixteen = workload(TOY, rows=4, cols=8), workload(TOY, rows=16, cols=8)
    add(trace_set, timed(TOY, ONE, four, 1.0), timed(TOY, TWO, four, 5.0))
    add(trace_set, timed(TOY, ONE, sixteen, 5.0), timed(TOY, TWO, sixteen, 1.0))
    return kernelarena.enable_apply(trace_set)


@kernelarena.apply("toy")
def toy(x: torch.Tensor, factor: float) -> torch.Tensor:
    return torch.full_like(x, -1)


@kernelarena.apply("toy")
def toy_into(x: torch.Tensor, factor: float, out: torch.Tensor) -> torch.Tensor:
    return out.fill_(-1)


@kernelarena.apply("toy")
def toy_keyword(x: torch.Tensor, factor: float, *, out: torch.Tensor | None = None) -> Any:
    return torch.full_like(x, -1) if out is None else out.fill_(-1)


def test_value_returning_calls_go_to_the_winner_of_their_shape() -> None:
    toy_runtime()
    assert toy(torch.zeros(4, 8), 2.0).eq(1).all()  # ONE: outputs allocated for it
    assert toy(torch.zeros(16, 8), 2.0).eq(2).all()  # TWO: returns its own
    assert toy(torch.zeros(5, 8), 2.0).eq(1).all()  # unmeasured: nearest is 4 x 8
    assert toy(torch.zeros(4, 8, dtype=torch.bfloat16), 2.0).eq(-1).all()  # nothing measured


def test_outputs_allocated_like_an_input_are_new_and_contiguous() -> None:
    toy_runtime()
    x = torch.zeros(8, 4).t()  # 4 x 8, the output's shape and dtype, not contiguous
    result = toy(x, 2.0)
    assert result.is_contiguous() and result.shape == (4, 8) and result.eq(1).all()
    assert result.data_ptr() != x.data_ptr() and x.eq(0).all()
    again = toy(torch.zeros(4, 8), 2.0)
    assert again.data_ptr() != result.data_ptr() and result.eq(1).all()


def test_destination_passing_calls_write_the_outputs_passed() -> None:
    toy_runtime()
    out = torch.empty(4, 8)
    assert toy_into(torch.zeros(4, 8), 2.0, out) is out and out.eq(1).all()
    big = torch.empty(16, 8)
    assert toy_into(torch.zeros(16, 8), 2.0, big) is big and big.eq(2).all()  # copied from TWO
    by_name = torch.empty(16, 8)
    assert toy_keyword(torch.zeros(16, 8), 2.0, out=by_name) is by_name and by_name.eq(2).all()
    assert toy_keyword(torch.zeros(16, 8), 2.0).eq(2).all()  # out left at None: value style
    assert toy_keyword(x=torch.zeros(4, 8), factor=2.0).eq(1).all()


def test_in_place_outputs_are_written_into_their_input() -> None:
    definition = inplace_definition()
    trace_set = toy_set(definition, solutions=[inplace_solution(definition)])
    add(trace_set, timed(definition, inplace_solution(definition), workload(definition, n=3), 1.0))
    kernelarena.enable_apply(trace_set)

    @kernelarena.apply("toy_inplace_fp32")
    def accumulate(x: torch.Tensor, acc: torch.Tensor) -> Any:
        raise AssertionError("the measured solution should run")

    acc = torch.ones(3)
    out, acc_out = accumulate(torch.full((3,), 2.0), acc)
    assert acc_out is acc and acc.eq(3).all() and out.eq(6).all()
    into = torch.empty(3)
    assert accumulate(torch.full((3,), 1.0), acc, into) is not None and into.eq(8).all()


def test_arguments_that_match_no_declaration_raise_naming_the_argument() -> None:
    toy_runtime()

    @kernelarena.apply("toy")
    def renamed(hidden: torch.Tensor, factor: float) -> torch.Tensor:
        return hidden

    cases = [
        (
            lambda: toy(torch.zeros(4, 8, dtype=torch.float64), 2.0),
            "argument 'x': dtype torch.float64",
        ),
        (lambda: toy(torch.zeros(8), 2.0), "argument 'x': expected 2 dimensions"),
        (lambda: toy(torch.zeros(4, 8), "two"), "argument 'factor': expected a float scalar"),
        (lambda: toy_into(torch.zeros(4, 8), 2.0, torch.empty(4, 9)), "argument 'out'"),
        (lambda: renamed(torch.zeros(4, 8, dtype=torch.int32), 2.0), "argument 'hidden'"),
        (
            lambda: toy(None, 2.0),
            "expected a float32 tensor of shape ['rows', 'cols'], got NoneType",
        ),
    ]
    for call, phrase in cases:
        with pytest.raises(ApplyArgumentError) as raised:
            call()
        assert phrase in str(raised.value), str(raised.value)
    with pytest.raises(
        TypeError, match=r"toy \(apply 'toy'\): missing a required argument: 'factor'"
    ):
        toy(torch.zeros(4, 8))
    with pytest.raises(ApplyArgumentError, match=r"float32 \(toy_fp32\), bfloat16 \(toy_bf16\)"):
        toy(torch.zeros(4, 8, dtype=torch.int8), 2.0)

    @kernelarena.apply("toy")
    def any_count(*args: Any) -> Any:
        return args

    with pytest.raises(ApplyArgumentError, match=r"1 arguments; expected 2 \(x, factor\) or 3"):
        any_count(torch.zeros(4, 8))
    definition = inplace_definition()
    kernelarena.enable_apply(toy_set(definition))

    @kernelarena.apply("toy_inplace_fp32")
    def accumulate(x: torch.Tensor, acc: torch.Tensor) -> Any:
        return x

    with pytest.raises(ApplyArgumentError, match="axis 'n' is 5 here but 4 in an earlier"):
        accumulate(torch.zeros(4), torch.zeros(5))


def test_disabled_apply_calls_the_fallback(monkeypatch: pytest.MonkeyPatch) -> None:
    assert toy(torch.zeros(4, 8), 2.0).eq(-1).all()  # never enabled
    assert toy.__kernelarena_site__.passthrough  # type: ignore[attr-defined]
    toy_runtime()
    assert toy(torch.zeros(4, 8), 2.0).eq(1).all()  # enabling later reaches earlier decorations
    kernelarena.disable_apply()
    assert toy(torch.zeros(4, 8), 2.0).eq(-1).all()
    monkeypatch.setenv("KERNELARENA_APPLY", "0")

    def body(x: torch.Tensor, factor: float) -> torch.Tensor:
        return x

    assert kernelarena.apply("toy")(body) is body  # off at decoration time: not even a wrapper


def test_the_environment_variables_enable_apply(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    trace_set = toy_set(TOY, solutions=[ONE, TWO])
    add(trace_set, timed(TOY, ONE, workload(TOY, rows=4, cols=8), 1.0))
    trace_set.save(tmp_path / "dataset")
    monkeypatch.setenv("KERNELARENA_APPLY", "1")
    monkeypatch.setenv("KERNELARENA_DATASET", str(tmp_path / "dataset"))
    monkeypatch.setattr(state, "_environment_read", False)  # as in a fresh process
    state._reset_sites()
    assert toy(torch.zeros(4, 8), 2.0).eq(1).all()
    assert state.current_runtime() is not None


def test_after_the_first_call_of_a_key_a_call_is_a_lookup(monkeypatch: pytest.MonkeyPatch) -> None:
    toy_runtime()
    x = torch.zeros(4, 8)
    toy(x, 2.0)
    site = toy.__kernelarena_site__  # type: ignore[attr-defined]
    monkeypatch.setattr(site, "dispatch", lambda *a: pytest.fail("slow path on a known key"))
    assert toy(x, 3.0).eq(1).all() and len(site.entries) == 1


def test_threads_calling_at_once_build_each_winner_once(monkeypatch: pytest.MonkeyPatch) -> None:
    builds: list[str] = []
    real_build = runtime_module.build_solution

    def counting(definition: Any, solution: Any, device: str) -> Any:
        builds.append(solution.name)
        return real_build(definition, solution, device)

    monkeypatch.setattr(runtime_module, "build_solution", counting)
    toy_runtime()
    shapes = {(4, 8): 1, (16, 8): 2, (5, 8): 1, (17, 8): 2, (3, 8): 1}
    failures: list[str] = []
    start = threading.Barrier(8)

    def worker(seed: int) -> None:
        start.wait()
        for i in range(150):
            shape = list(shapes)[(seed + i) % len(shapes)]
            result = toy(torch.zeros(shape), 2.0)
            if not result.eq(shapes[shape]).all():
                failures.append(f"{shape}: {result.flatten()[0].item()}")

    threads = [threading.Thread(target=worker, args=(s,)) for s in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert failures == []
    assert sorted(builds) == sorted([ONE.name, TWO.name])


def test_an_unknown_name_runs_the_body(caplog: pytest.LogCaptureFixture) -> None:
    toy_runtime()

    @kernelarena.apply("no_such_operator")
    def body(x: torch.Tensor) -> torch.Tensor:
        return x + 1

    assert body(torch.zeros(2)).eq(1).all()
    assert "'no_such_operator' matches no definition, family or op_type" in caplog.text


def test_a_list_with_an_unknown_name_runs_the_body_and_names_it(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """As the runner and the command line refuse such a list, apply does not serve part of it:
    the warning names what matched nothing, and the body runs."""
    toy_runtime()

    @kernelarena.apply(["toy_fp32", "toy_fp23"])
    def body(x: torch.Tensor, factor: float) -> torch.Tensor:
        return x + 1

    assert body(torch.zeros(4, 8), 2.0).eq(1).all()
    assert "'toy_fp23' matches no definition" in caplog.text and "body runs" in caplog.text
