"""The sandbox's requests that call the solution where someone may time it: the probe and the
timed calls the sandbox reports (``probe``, ``time``), and the calls the judge's clocks time and its
checks read (``eager``, ``replay``). Every one goes through ``Sandbox._calls``, so nothing in how a
call is made tells a checked call from a timed one.
"""

from __future__ import annotations

import sys
import time
from typing import Any


class SolutionCalls:
    """A mixin of ``server.Sandbox``, which sets what is declared here and gives ``_calls``,
    ``_delivered`` and ``_sync``."""

    torch: Any
    device: Any
    on_gpu: bool
    runnable: Any
    sets: dict[int, Any]
    graph: Any
    graph_calls: int
    graph_sets: list[int]
    graph_results: list[Any]

    def _calls(self, set_ids: list[int]) -> tuple[Any, list[Any]]:
        raise NotImplementedError

    def _delivered(self, set_ids: list[int], results: list[Any]) -> list[Any] | None:
        raise NotImplementedError

    def _sync(self) -> None:
        raise NotImplementedError

    def _probe(self, set_ids: list[int], options: dict[str, Any]) -> dict[str, Any]:
        from kernelarena.evaluate.sandbox.arena import give_back_cached
        from kernelarena.evaluate.sandbox.graph_timing import prefers_graph

        fn, _ = self._calls(set_ids)
        graph, capture_failed = prefers_graph(
            fn,
            self.device,
            warmup=options["warmup"],
            graph_below_us=options["graph_below_us"],
            allow_graph=options.get("allow_graph", True),
        )
        # The results held from the probe's graphs (a large call's outputs, in the graphs' own
        # pools) go, and their memory back to the device past what a process may keep: the
        # judge's and the reference's sets need it more than the timed calls' first allocation.
        del fn, _
        give_back_cached(self.device)
        return {"graph": graph, "capture_failed": capture_failed}

    def _time(self, set_ids: list[int], options: dict[str, Any], graph: bool) -> dict[str, Any]:
        compiles = _dynamo_frames()
        reply = self._timed(set_ids, options, graph)
        reply["compiles"] = _dynamo_frames() - compiles
        return reply

    def _timed(self, set_ids: list[int], options: dict[str, Any], graph: bool) -> dict[str, Any]:
        from kernelarena.evaluate.sandbox.graph_timing import graph_calls
        from kernelarena.evaluate.sandbox.timing import time_events_or_clock

        torch = self.torch
        capture_failed = False
        with torch.no_grad():
            if graph:
                samples = self._graph_samples(set_ids, graph_calls(len(set_ids)), options)
                if samples is not None:
                    returned = self._delivered(set_ids, self.graph_results)
                    return {"mode": "cuda_graph", "samples_ms": samples, "returned": returned}
                capture_failed = True
            fn, results = self._calls(set_ids)
            timing = time_events_or_clock(
                fn,
                self.device,
                warmup=options["warmup"],
                max_iterations=options["max_iterations"],
                min_iterations=options["min_iterations"],
                budget_ms=options["budget_ms"],
            )
            returned = self._delivered(set_ids, results)
        return {
            "mode": timing.mode,
            "samples_ms": timing.samples_ms,
            "returned": returned,
            "capture_failed": capture_failed,
        }

    def _graph_samples(
        self, set_ids: list[int], calls: int, options: dict[str, Any]
    ) -> list[float] | None:
        """Capture ``calls`` calls over ``set_ids`` in one graph, kept for the judge's ``replay``;
        time its replays. A value-returning solution's results are held per set, so its outputs
        rotate through fresh memory as a destination-passing solution's do; they are the graph's
        memory after the capture (a replay rewrites them), so that every pass over the graph can
        deliver what it computed."""
        from kernelarena.evaluate.sandbox.graph_timing import capture_graph, time_replays

        torch, device = self.torch, self.device
        fn, results = self._calls(set_ids)
        try:
            graph = capture_graph(fn, device, calls=calls, warmup=options["warmup"])
        except Exception:  # not capturable: host syncs, allocations outside the graph pool
            torch.cuda.synchronize(device)
            return None
        self.graph, self.graph_calls = graph, calls
        self.graph_sets, self.graph_results = list(set_ids), results
        timing = time_replays(graph, device, calls, budget_ms=options.get("graph_budget_ms"))
        return timing.samples_ms

    def _eager(self, set_ids: list[int], count: int, ordered: bool = False) -> dict[str, Any]:
        """``count`` calls over the sets in turn, back to back, then the device synchronized: the
        judge's clock runs around this request, and its checks of correctness use it too (one call
        per set). A value-returning solution's last result on each set then lands in the judge's
        buffers. The reply's ``host_ms``: the time the calls took to return, before the
        synchronization (the host's submit time; a claim the judge bounds by its own clock).
        ``ordered`` (the judge's check passes): the reply's ``unordered`` lists the sets whose
        outputs were still being written on another stream when the calls returned
        (``stream_order``)."""
        from kernelarena.evaluate.sandbox.stream_order import changed_since, fingerprints
        from kernelarena.evaluate.sandbox.timing import reset_persisting_l2

        fn, results = self._calls(set_ids)
        if self.on_gpu:
            reset_persisting_l2()
        with self.torch.no_grad():
            began = time.perf_counter()
            for i in range(count):
                fn(i)
            host_ms = (time.perf_counter() - began) * 1e3
            written = self._written(set_ids[:count], results) if ordered and self.on_gpu else []
            taken = fingerprints(self.torch, written)
            self._sync()
            unordered = [set_ids[i] for i in changed_since(self.torch, written, taken)]
            returned = self._delivered(set_ids[:count], results)
        return {"ok": True, "host_ms": host_ms, "returned": returned, "unordered": unordered}

    def _written(self, set_ids: list[int], results: list[Any]) -> list[list[Any]]:
        """What each set's call wrote: its destinations, or the plain device tensors it returned."""
        if self.runnable.destination_passing_style:
            return [list(self.sets[set_id].outputs) for set_id in set_ids]
        torch = self.torch
        written = []
        for result in results[: len(set_ids)]:
            values = list(result) if isinstance(result, tuple | list) else [result]
            written.append(
                [v for v in values if type(v) is torch.Tensor and on_device(v.device, self.device)]
            )
        return written

    def _replay(self, count: int) -> dict[str, Any]:
        """``count`` replays of the timed graph, the device synchronized; a value-returning
        solution's results of the graph's calls then land in the judge's buffers of their sets."""
        from kernelarena.evaluate.sandbox.timing import reset_persisting_l2

        if self.graph is None:
            return {"error": "no graph was captured", "kind": "runtime", "healthy": True}
        reset_persisting_l2()
        for _ in range(count):
            self.graph.replay()
        self._sync()
        returned = self._delivered(self.graph_sets, self.graph_results)
        return {"ok": True, "calls": self.graph_calls, "returned": returned}


def on_device(place: Any, device: Any) -> bool:
    """Whether a tensor on ``place`` is on ``device`` ("cuda" and "cuda:0" alike)."""
    return bool(place.type == device.type and (place.index or 0) == (device.index or 0))


def _dynamo_frames() -> int:
    """Frames torch.compile has set out to compile in this process so far."""
    if "torch._dynamo" not in sys.modules:
        return 0
    from torch._dynamo.utils import counters

    return int(counters["frames"]["total"])
