"""The judge's check of the CUDA graph a time was measured on (``timing_check.verify_graph``), with
a stand-in for the sandbox: the graph's replay writes what its capture recorded. The GPU end of it
(real capture, real replays) is in test_adversarial's GPU attacks."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest
import torch

from kernelarena.data import DType, Status, Tolerance
from kernelarena.evaluate.shared_sets import CheckFailed
from kernelarena.evaluate.timing_check import verify_graph

FACTOR = 1.5
TOLERANCE = Tolerance(atol=1e-6, rtol=1e-6)


class StandIn:
    """Sets of ``x`` (input) and ``out`` (output) for out = x * FACTOR, and a sandbox whose graph
    replay does what ``graph`` says: "honest" computes every set (or, value-returning, the
    graph's last call), "empty" writes nothing, "cached" writes what the sets held at capture."""

    def __init__(self, sets: int, dps: bool, graph: str) -> None:
        self.device = torch.device("cpu")
        out = SimpleNamespace(aliases=None, dtype=DType.FLOAT32)
        definition = SimpleNamespace(outputs={"out": out}, tolerance_for=lambda name: TOLERANCE)
        self.job = SimpleNamespace(
            destination_passing_style=dps,
            definition=definition,
            workload=SimpleNamespace(uuid="w"),
        )
        self.timed = [
            SimpleNamespace(inputs={"x": torch.randn(64)}, outputs={"out": torch.empty(64)})
            for _ in range(sets)
        ]
        for shared in self.timed:
            shared.outputs["out"].copy_(shared.inputs["x"] * FACTOR)
        self.captured = [s.inputs["x"].clone() for s in self.timed]
        self.graph = graph
        self.requests: list[tuple[Any, ...]] = []
        self.sandbox = SimpleNamespace(request=self.request)

    def refill(self, shared: Any, seed: int, keep_private: bool, poison: bool = True) -> None:
        generator = torch.Generator().manual_seed(seed)
        shared.inputs["x"].copy_(torch.randn(64, generator=generator))
        if poison:
            self.poison(shared)

    def poison(self, shared: Any) -> None:
        shared.outputs["out"].fill_(float("nan"))

    def request(self, *message: Any) -> dict[str, Any]:
        self.requests.append(message)
        assert message == ("replay_check",)
        calls = max(20, len(self.timed))
        indices = (
            range(len(self.timed))
            if self.job.destination_passing_style
            else [(calls - 1) % len(self.timed)]
        )
        for i in indices:
            if self.graph == "honest":
                self.timed[i].outputs["out"].copy_(self.timed[i].inputs["x"] * FACTOR)
            elif self.graph == "cached":
                self.timed[i].outputs["out"].copy_(self.captured[i] * FACTOR)
        return {"ok": True, "calls": calls}

    def expected(self, shared: Any) -> dict[str, torch.Tensor]:
        return {"out": shared.inputs["x"].double() * FACTOR}

    def produced(self, shared: Any) -> dict[str, torch.Tensor]:
        return dict(shared.outputs)

    def compare_all(self, produced: Any, expected: Any) -> list[Any]:
        from kernelarena.evaluate.compare import compare

        return [compare("out", produced["out"], expected["out"], DType.FLOAT32, TOLERANCE)]


@pytest.mark.parametrize("dps", [True, False])
@pytest.mark.parametrize("sets", [3, 24])
def test_a_graph_that_does_the_work_passes(dps: bool, sets: int) -> None:
    stand_in = StandIn(sets, dps, "honest")
    verify_graph(stand_in, stand_in.timed)  # type: ignore[arg-type]
    assert stand_in.requests == [("replay_check",)]


@pytest.mark.parametrize("dps", [True, False])
@pytest.mark.parametrize("graph", ["empty", "cached"])
def test_a_graph_that_skips_or_caches_the_work_is_rejected(dps: bool, graph: str) -> None:
    stand_in = StandIn(5, dps, graph)
    with pytest.raises(CheckFailed) as failed:
        verify_graph(stand_in, stand_in.timed)  # type: ignore[arg-type]
    assert failed.value.status is Status.RUNTIME_ERROR
    assert "timing rejected: one replay of the CUDA graph" in str(failed.value.log)
    assert ("unwritten" in failed.value.log) == (graph == "empty")


@pytest.mark.parametrize(
    ("sets", "dps", "in_place", "written", "compared"),
    [
        (3, True, False, [0, 1, 2], True),
        (3, False, False, [1], True),  # 20 calls over 3 sets: the last call is set 19 % 3 = 1
        (24, False, False, [23], True),
        (3, True, True, [0, 1, 2], False),  # in place, called 6-7 times a replay: completeness
        (24, True, True, list(range(24)), True),  # in place, once a replay: compared
    ],
)
def test_the_graph_check_looks_where_the_graph_writes(
    monkeypatch: pytest.MonkeyPatch,
    sets: int,
    dps: bool,
    in_place: bool,
    written: list[int],
    compared: bool,
) -> None:
    from kernelarena.evaluate import timing_check

    seen: dict[str, Any] = {}

    def fake_pass(sets_: Any, timed: Any, written_: Any, request: Any, compare: bool, graph: bool):
        seen.update(written=written_, compare=compare, request=request, graph=graph)

    monkeypatch.setattr(timing_check, "_verify_pass", fake_pass)
    stand_in = StandIn(sets, dps, "honest")
    stand_in.job.definition.outputs["out"].aliases = "x" if in_place else None
    verify_graph(stand_in, stand_in.timed)  # type: ignore[arg-type]
    assert seen == {
        "written": written,
        "compare": compared,
        "request": ("replay_check",),
        "graph": True,
    }
