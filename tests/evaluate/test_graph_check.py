"""The judge's check of the CUDA graph a time was measured on (``timing_check.verify_graph``), with
a stand-in for the sandbox: the graph's replay writes what its capture recorded. The GPU end of it
(real capture, real replays) is in test_adversarial's GPU attacks."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest
import torch

from kernelarena.data import DType, Status, Tolerance
from kernelarena.evaluate.judge.timing_check import verify_graph
from kernelarena.evaluate.judge.verdicts import CheckFailed

FACTOR = 1.5
TOLERANCE = Tolerance(atol=1e-6, rtol=1e-6)


class StandIn:
    """Sets of ``x`` (input) and ``out`` (output) for out = x * FACTOR, and a sandbox whose graph
    replay does what ``graph`` says: "honest" computes every set, "empty" writes nothing,
    "cached" writes what the sets held at capture. A value-returning solution's results are
    delivered for every set, as the sandbox delivers what the graph's calls hold."""

    def __init__(self, sets: int, dps: bool, graph: str) -> None:
        self.device = torch.device("cpu")
        out = SimpleNamespace(aliases=None, dtype=DType.FLOAT32)
        definition = SimpleNamespace(
            outputs={"out": out},
            tolerance_for=lambda name: TOLERANCE,
            shape_of=lambda spec, axes: [64],
        )
        self.job = SimpleNamespace(
            destination_passing_style=dps,
            definition=definition,
            workload=SimpleNamespace(uuid="w"),
            axes={},
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
        self.sandbox = SimpleNamespace(
            request=self.request,
            request_beside=lambda message, beside: (self.request(*message), beside()),
        )

    def draw_ahead(self, seeds: list[int]) -> None:
        pass  # the refills below draw on the spot

    def refill(self, shared: Any, seed: int, keep_private: bool, poison: bool = True) -> None:
        generator = torch.Generator().manual_seed(seed)
        shared.inputs["x"].copy_(torch.randn(64, generator=generator))
        if poison:
            self.poison(shared)

    def refill_some(self, shared: Any, seed: int) -> None:
        generator = torch.Generator().manual_seed(seed)
        shared.inputs["x"][:3] = torch.randn(3, generator=generator)
        self.poison(shared)

    def poison(self, shared: Any) -> None:
        shared.outputs["out"].fill_(float("nan"))

    def request(self, *message: Any) -> dict[str, Any]:
        self.requests.append(message)
        assert message == ("replay", 1)
        calls = max(20, len(self.timed))
        for shared, captured in zip(self.timed, self.captured, strict=True):
            if self.graph == "honest":
                shared.outputs["out"].copy_(shared.inputs["x"] * FACTOR)
            elif self.graph == "cached":
                shared.outputs["out"].copy_(captured * FACTOR)
        returned = [[{"type": "Tensor", "dtype": "torch.float32", "shape": [64]}]] * len(self.timed)
        return {"ok": True, "calls": calls, "returned": returned}

    def expect(self, sets: list[Any]) -> None:
        """As ``SetMaker.expect``: nothing to fetch here, ``expected`` computes on demand."""

    def expected(self, shared: Any) -> dict[str, torch.Tensor]:
        return {"out": shared.inputs["x"].double() * FACTOR}

    def produced(self, shared: Any) -> dict[str, torch.Tensor]:
        return dict(shared.outputs)

    def all_right(self, checked: list[Any]) -> bool:
        """As ``SetMaker.all_right``: the cheap check first (here in float32, so it applies)."""
        from kernelarena.runtime.compare import all_within

        verdicts = [
            all_within(self.produced(s)["out"], self.expected(s)["out"].float(), TOLERANCE)
            for s in checked
        ]
        return all(v is not None and bool(v) for v in verdicts)

    def compare_all(self, produced: Any, expected: Any, shared: Any = None) -> list[Any]:
        from kernelarena.evaluate.compare import compare

        return [compare("out", produced["out"], expected["out"], DType.FLOAT32, TOLERANCE)]


@pytest.mark.parametrize("dps", [True, False])
@pytest.mark.parametrize("sets", [3, 24])
def test_a_graph_that_does_the_work_passes(dps: bool, sets: int) -> None:
    stand_in = StandIn(sets, dps, "honest")
    verify_graph(stand_in, stand_in.timed)  # type: ignore[arg-type]
    assert stand_in.requests == [("replay", 1)]


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
    ("sets", "in_place", "compared"),
    [
        (3, False, True),
        (24, False, True),
        (3, True, False),  # in place, called 6-7 times a replay: completeness only
        (24, True, True),  # in place, once a replay: compared
    ],
)
def test_the_graph_check_compares_where_each_set_is_called_once_a_replay(
    monkeypatch: pytest.MonkeyPatch, sets: int, in_place: bool, compared: bool
) -> None:
    from kernelarena.evaluate.judge import timing_check

    seen: dict[str, Any] = {}

    def fake_pass(sets_: Any, timed: Any, request: Any, compare: bool, graph: bool) -> None:
        seen.update(compare=compare, request=request, graph=graph)

    monkeypatch.setattr(timing_check, "_verify_pass", fake_pass)
    stand_in = StandIn(sets, True, "honest")
    stand_in.job.definition.outputs["out"].aliases = "x" if in_place else None
    verify_graph(stand_in, stand_in.timed)  # type: ignore[arg-type]
    assert seen == {"compare": compared, "request": ("replay", 1), "graph": True}
