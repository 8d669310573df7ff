"""Verify on first use: a solution kernelarena does not ship is compared with the reference on its
first call at each shape, dropped for the process when it disagrees, and the call returns the next
choice's result; library solutions are trusted; ``verify_every`` compares again later."""

from __future__ import annotations

import warnings
from typing import Any

import pytest
import torch

import kernelarena
from kernelarena.data import BuildSpec, Solution, SourceFile
from kernelarena.dispatch.runtime import ApplyWarning, shipped
from kernelarena.library import load_library
from kernelarena.testing import assert_close
from tests.dispatch.toys import (
    add,
    inplace_definition,
    marker,
    timed,
    toy_definition,
    toy_set,
    workload,
)

TOY = toy_definition()
WRONG = marker(TOY, 7)  # fills its output with 7: wrong for every input
SMALL, LARGE = workload(TOY, rows=4, cols=8), workload(TOY, rows=64, cols=8)


def python_solution(name: str, source: str, definition: Any = TOY) -> Solution:
    return Solution(
        name=name,
        definition=definition.name,
        author="tests",
        spec=BuildSpec(language="python", target_hardware=["cpu"], entry_point="s.py::run"),
        sources=[SourceFile(path="s.py", content=source)],
    )


RIGHT = python_solution("toy_fp32_right", "def run(x, factor, out):\n    out.copy_(x * factor)\n")
# Right at 4 x 8, wrong (by one) at any other shape.
RIGHT_WHEN_SMALL = python_solution(
    "toy_fp32_small_only",
    "def run(x, factor, out):\n    out.copy_(x * factor + (x.shape[0] != 4))\n",
)
# Right on its first two calls in a process, wrong (by one) from the third on.
RIGHT_AT_FIRST = python_solution(
    "toy_fp32_right_at_first",
    "CALLS = [0]\n\n\ndef run(x, factor, out):\n    CALLS[0] += 1\n"
    "    out.copy_(x * factor + (CALLS[0] > 2))\n",
)


def ranked(*solutions: Solution, at: tuple[Any, ...] = (SMALL, LARGE)) -> Any:
    """A dataset where ``solutions`` rank in the order given (1 us, 2 us, ...) at every workload."""
    trace_set = toy_set(TOY, solutions=list(solutions))
    for load in at:
        add(trace_set, *(timed(TOY, s, load, 1.0 + i) for i, s in enumerate(solutions)))
    return trace_set


@kernelarena.apply("toy")
def toy(x: torch.Tensor, factor: float) -> torch.Tensor:
    return x * factor


@kernelarena.apply("toy")
def toy_into(x: torch.Tensor, factor: float, out: torch.Tensor) -> torch.Tensor:
    return torch.mul(x, factor, out=out)


def test_a_wrong_winner_is_dropped_and_the_call_returns_the_next_choice() -> None:
    runtime = kernelarena.enable_apply(ranked(WRONG, RIGHT), verify=True)
    x = torch.randn(4, 8)
    pristine = x.clone()
    with pytest.warns(
        ApplyWarning, match=r"toy_fp32_m7 is dropped .* disagrees with the reference"
    ):
        result = toy(x, 2.0)
    assert_close(result, pristine * 2.0, 0.0, 0.0)
    assert torch.equal(x, pristine)  # the wrong solution never saw the caller's tensor
    assert list(runtime.dropped) == [WRONG.name]
    out = torch.empty(64, 8)
    y = torch.randn(64, 8)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # dropped once: no second warning, no second try
        assert toy_into(y, 3.0, out) is out
    assert_close(out, y * 3.0, 0.0, 0.0)


def test_with_every_choice_wrong_the_body_answers() -> None:
    kernelarena.enable_apply(ranked(WRONG, marker(TOY, 8)), verify=True)
    x = torch.randn(4, 8)
    with pytest.warns(ApplyWarning):
        assert_close(toy(x, -1.5), x * -1.5, 0.0, 0.0)


def test_a_solution_wrong_at_a_later_shape_leaves_every_key(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Right at 4 x 8 (kept there), wrong at 64 x 8: dropped, and the 4 x 8 key forgets it too."""
    runtime = kernelarena.enable_apply(ranked(RIGHT_WHEN_SMALL, RIGHT), verify=True)
    small = torch.randn(4, 8)
    assert_close(toy(small, 2.0), small * 2.0, 0.0, 0.0)
    assert runtime.dropped == {}
    large = torch.randn(64, 8)
    with pytest.warns(ApplyWarning, match="toy_fp32_small_only is dropped"):
        assert_close(toy(large, 2.0), large * 2.0, 0.0, 0.0)
    site = toy.__kernelarena_site__  # type: ignore[attr-defined]
    assert site.entries == {}  # every prepared call forgotten
    caplog.set_level("DEBUG", logger="kernelarena.dispatch")
    small = torch.randn(4, 8)
    assert_close(toy(small, 2.0), small * 2.0, 0.0, 0.0)
    assert "{'rows': 4, 'cols': 8} -> toy_fp32_right" in caplog.text


def test_a_solution_that_writes_an_input_it_may_not_is_dropped() -> None:
    """Right output, but x scaled in place too: the judge's check that inputs stay unchanged."""
    writes_x = python_solution(
        "toy_fp32_writes_x",
        "def run(x, factor, out):\n    out.copy_(x.mul_(1.0) * factor)\n    x.add_(1)\n",
    )
    kernelarena.enable_apply(ranked(writes_x, RIGHT), verify=True)
    x = torch.randn(4, 8)
    pristine = x.clone()
    with pytest.warns(ApplyWarning, match="input 'x' was modified"):
        assert_close(toy(x, 2.0), pristine * 2.0, 0.0, 0.0)
    assert torch.equal(x, pristine)


def test_an_in_place_solution_is_tried_on_copies() -> None:
    """acc += x in place: the wrong solution adds twice; it is tried on a copy of acc, dropped,
    and the caller's acc is written once, by the fallback."""
    definition = inplace_definition()
    twice = python_solution(
        "toy_inplace_twice",
        "def run(x, acc, out):\n    acc.add_(x).add_(x)\n    out.copy_(acc * 2)\n",
        definition,
    )
    trace_set = toy_set(definition, solutions=[twice])
    add(trace_set, timed(definition, twice, workload(definition, n=5), 1.0))
    kernelarena.enable_apply(trace_set, verify=True)

    @kernelarena.apply("toy_inplace_fp32")
    def accumulate(x: torch.Tensor, acc: torch.Tensor) -> Any:
        acc.add_(x)
        return acc * 2, acc

    x, acc = torch.randn(5), torch.randn(5)
    expected = acc + x
    with pytest.warns(ApplyWarning, match="toy_inplace_twice is dropped"):
        out, acc_out = accumulate(x, acc)
    assert acc_out is acc
    assert_close(acc, expected, 1e-6, 1e-6)
    assert_close(out, expected * 2, 1e-6, 1e-6)


def test_a_right_solution_is_checked_once_per_key_and_then_runs_alone(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from kernelarena.dispatch import first_use

    references: list[int] = []
    real = first_use.expected_outputs

    def counted(definition: Any, inputs: Any) -> Any:
        references.append(inputs[0].shape[0])
        return real(definition, inputs)

    monkeypatch.setattr(first_use, "expected_outputs", counted)
    runtime = kernelarena.enable_apply(ranked(RIGHT, WRONG), verify=True)
    for rows in (4, 64, 4, 64, 4):
        x = torch.randn(rows, 8)
        assert_close(toy(x, 0.5), x * 0.5, 0.0, 0.0)
    assert references == [4, 64] and runtime.dropped == {}


def test_every_k_calls_a_solution_is_compared_again() -> None:
    """Right on its first two calls (the check's and the caller's first), wrong from then on: with
    verify_every=3 the caller's third call is compared, catches it, and returns the next
    choice's result; the second, unchecked, was wrong (sampling bounds how long a lie lasts)."""
    runtime = kernelarena.enable_apply(ranked(RIGHT_AT_FIRST, RIGHT), verify=True, verify_every=3)
    results = []
    for call in range(6):
        x = torch.randn(4, 8)
        if call == 2:
            with pytest.warns(ApplyWarning, match=r"a re-check \(every 3 calls\) disagrees"):
                results.append((toy(x, 2.0), x * 2.0))
        else:
            results.append((toy(x, 2.0), x * 2.0))
    assert RIGHT_AT_FIRST.name in runtime.dropped
    wrong = [i for i, (got, want) in enumerate(results) if not torch.equal(got, want)]
    assert wrong == [1]
    for got, want in results[2:]:
        assert_close(got, want, 0.0, 0.0)


def test_verify_off_runs_the_winner_unchecked() -> None:
    kernelarena.enable_apply(ranked(WRONG, RIGHT), verify=False)
    assert toy(torch.randn(4, 8), 2.0).eq(7).all()


def test_library_solutions_are_trusted_and_an_edited_copy_is_not() -> None:
    library = load_library()
    runtime = kernelarena.enable_apply(library, verify=True)
    definition = library.definitions["scale_fp32"]
    shipped = library.solutions["scale_fp32_torch_eager"]
    assert not runtime.needs_check(definition, shipped)
    edited = shipped.model_copy(
        update={
            "name": "scale_fp32_torch_eager_edited",
            "sources": [
                SourceFile(path=f.path, content=f.content + "\n# edited\n") for f in shipped.sources
            ],
        }
    )
    assert runtime.needs_check(definition, edited)


def test_shipped_is_byte_for_byte() -> None:
    library = load_library()
    definition_ = library.definitions["rmsnorm_bf16"]
    solution = library.solutions["rmsnorm_bf16_triton"]
    assert shipped(definition_, solution)
    renamed_copy = solution.model_copy(update={"description": "mine"})
    assert shipped(definition_, renamed_copy)  # descriptions are not content
    other_definition = library.definitions["rmsnorm_fp16"]
    assert not shipped(other_definition, solution)
