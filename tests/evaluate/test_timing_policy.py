"""How a call is timed: its GPU time picks CUDA graphs or events, not its host time.

The CPU tests stand in for the GPU timers; the ``gpu`` test runs the real probe.
"""

from __future__ import annotations

import gc
import time
from typing import Any

import pytest
import torch

from kernelarena.evaluate.sandbox import graph_timing
from kernelarena.evaluate.sandbox.graph_timing import (
    capture_graph,
    held_per_set,
    prefers_graph,
    probe_cuda_graph,
    time_cuda_graph,
)
from kernelarena.evaluate.sandbox.timing import Timing, summarize
from kernelarena.runtime.capture import collector_paused


def _timing(ms: float) -> Timing:
    return summarize([ms], "stand-in")


def _stand_ins(
    monkeypatch: pytest.MonkeyPatch,
    probe: Timing | Exception,
    events: Timing,
    capturable: bool = True,
) -> list[str]:
    """Replace the GPU timers the evaluator uses; return the names of those called, in order."""
    called: list[str] = []

    def fake_capture_fails(fn: Any, device: torch.device) -> bool:
        called.append("capture")
        return not capturable

    def fake_probe(fn: Any, device: torch.device, **kwargs: Any) -> Timing:
        called.append("probe")
        if isinstance(probe, Exception):
            raise probe
        return probe

    def fake_events(fn: Any, device: torch.device, **kwargs: Any) -> Timing:
        called.append("events")
        return events

    monkeypatch.setattr(graph_timing, "probe_cuda_graph", fake_probe)
    monkeypatch.setattr(graph_timing, "capture_fails", fake_capture_fails)
    monkeypatch.setattr(graph_timing, "time_cuda", fake_events)
    monkeypatch.setattr(torch.cuda, "synchronize", lambda device=None: None)
    return called


def _short(fn: Any, device: torch.device, graph_below_us: float) -> bool:
    graph, _ = prefers_graph(fn, device, warmup=3, graph_below_us=graph_below_us)
    return graph


def _host_bound(seconds: float = 150e-6) -> Any:
    """A call whose host side takes ``seconds`` (a Python launcher), whatever the GPU does."""

    def call(i: int) -> None:
        deadline = time.perf_counter() + seconds
        while time.perf_counter() < deadline:
            pass

    return call


def test_a_call_slow_on_the_host_but_short_on_the_gpu_is_timed_as_a_graph(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """An autotuned Triton launcher: 110 us per call with events (its Python), 18 us on the GPU."""
    called = _stand_ins(monkeypatch, probe=_timing(0.018), events=_timing(0.110))
    device = torch.device("cuda:0")
    assert _short(_host_bound(), device, 100.0)
    assert called == ["events", "probe"]


def test_a_call_long_on_the_gpu_is_timed_with_events_captured_but_never_replayed(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The host submits in far less time than the events measured: the GPU is the slower side.
    One capture, without replays, says whether the call could run inside a graph."""
    called = _stand_ins(monkeypatch, probe=_timing(0.010), events=_timing(0.250))
    device = torch.device("cuda:0")
    assert prefers_graph(lambda i: None, device, warmup=3, graph_below_us=100.0) == (False, False)
    assert called == ["events", "capture"]


def test_a_call_long_on_the_gpu_that_cannot_be_captured_says_so(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A call that synchronizes the device, long enough on a loaded GPU that events time it:
    apply must learn that it cannot run inside a capture, not find it unknown."""
    called = _stand_ins(monkeypatch, probe=_timing(0.010), events=_timing(0.250), capturable=False)
    device = torch.device("cuda:0")
    assert prefers_graph(lambda i: None, device, warmup=3, graph_below_us=100.0) == (False, True)
    assert called == ["events", "capture"]


def test_a_call_short_with_events_is_timed_as_a_graph(monkeypatch: pytest.MonkeyPatch) -> None:
    called = _stand_ins(monkeypatch, probe=_timing(0.500), events=_timing(0.010))
    device = torch.device("cuda:0")
    assert _short(lambda i: None, device, 100.0)
    assert called == ["events"]


def test_the_threshold_is_graph_below_us(monkeypatch: pytest.MonkeyPatch) -> None:
    _stand_ins(monkeypatch, probe=_timing(0.050), events=_timing(0.050))
    device = torch.device("cuda:0")
    assert _short(lambda i: None, device, 60.0)
    assert not _short(lambda i: None, device, 40.0)


def test_a_host_bound_call_that_cannot_be_captured_is_timed_with_events(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Graph timing would fail the same way: events."""
    failure = RuntimeError("operation not permitted when stream is capturing")
    called = _stand_ins(monkeypatch, probe=failure, events=_timing(0.200))
    device = torch.device("cuda:0")
    assert not _short(_host_bound(), device, 100.0)
    assert called == ["events", "probe"]


def test_on_cpu_the_clock_times_without_a_probe(monkeypatch: pytest.MonkeyPatch) -> None:
    called = _stand_ins(monkeypatch, probe=_timing(0.001), events=_timing(0.001))
    device = torch.device("cpu")
    assert not _short(lambda i: None, device, 100.0)
    assert called == []


@pytest.mark.gpu
def test_gpu_probe_measures_the_gpu_not_the_host() -> None:
    """A tiny kernel behind 300 us of host work per call: the probe sees the kernel."""
    device = torch.device("cuda:0")
    x = torch.randn(1024, device=device)
    out = torch.empty_like(x)

    def call(i: int) -> None:
        deadline = time.perf_counter() + 300e-6
        while time.perf_counter() < deadline:
            pass
        torch.mul(x, 2.0, out=out)

    probe = probe_cuda_graph(call, device)
    assert probe.median_ms < 0.1, probe
    assert torch.equal(out, x * 2.0)
    assert _short(call, device, 100.0)


@pytest.mark.gpu
def test_gpu_capture_fails_for_a_host_synchronization_and_runs_nothing() -> None:
    """The capture-only look: a call that synchronizes the device fails it, a plain kernel does
    not, and neither ran on the GPU during the capture (its output keeps its poison)."""
    device = torch.device("cuda:0")
    x = torch.randn(1 << 20, device=device)
    out = torch.full_like(x, float("nan"))

    def plain(i: int) -> None:
        torch.mul(x, 2.0, out=out)

    def synchronizing(i: int) -> None:
        torch.mul(x, 2.0, out=out)
        torch.cuda.synchronize(device)

    assert not graph_timing.capture_fails(plain, device)
    assert torch.isnan(out).all()
    assert graph_timing.capture_fails(synchronizing, device)
    plain(0)  # the process still works after the failed capture
    assert torch.equal(out, x * 2.0)
    # and so does its random generator, which a failed capture leaves marked as capturing
    assert torch.randn(4, device=device).isfinite().all()


def _graph_dropped_in_a_cycle(device: torch.device) -> None:
    """A captured CUDA graph left unreachable inside a reference cycle: only the cyclic collector
    frees it, and its reset then runs wherever the collector happens to run."""
    x = torch.randn(16, device=device)
    graph = torch.cuda.CUDAGraph()
    side = torch.cuda.Stream(device)
    with torch.cuda.stream(side), collector_paused():  # an earlier one is not collected here
        graph.capture_begin()
        x.mul_(2.0)
        graph.capture_end()
    torch.cuda.synchronize(device)
    holder: dict[str, Any] = {"graph": graph}
    holder["self"] = holder


@pytest.mark.gpu
def test_gpu_a_collection_set_off_inside_the_capture_does_not_fail_it() -> None:
    """A solution whose call allocates Python objects can set the cyclic collector off inside the
    judge's capture; a CUDA graph it collects there (dropped earlier in a cycle, as a test's
    traceback or a torch.compile cache leaves one) would be reset mid-capture and fail it
    ("operation failed due to a previous error during capture"). The judge's captures hold the
    collector off: with it set to run at every allocation, the capture and the probe succeed."""
    device = torch.device("cuda:0")
    x = torch.randn(1 << 16, device=device)
    out = torch.empty_like(x)

    def allocating(i: int) -> None:
        torch.mul(x, 2.0, out=out)
        [[] for _ in range(64)]  # container allocations: the collector's trigger

    thresholds = gc.get_threshold()
    gc.collect()
    try:
        gc.set_threshold(1)
        _graph_dropped_in_a_cycle(device)
        assert not graph_timing.capture_fails(allocating, device)
        _graph_dropped_in_a_cycle(device)
        graph_timing.capture_graph(allocating, device, calls=4, warmup=1).replay()
        _graph_dropped_in_a_cycle(device)
        assert graph_timing.probe_cuda_graph(allocating, device).count == 3
    finally:
        gc.set_threshold(*thresholds)
        gc.collect()
    torch.cuda.synchronize(device)
    assert torch.equal(out, x * 2.0)


@pytest.mark.gpu
def test_gpu_graph_replays_stop_at_their_budget() -> None:
    """With a budget, replays stop once they have taken that long, never before ``min_replays``;
    without one, all of them run."""
    device = torch.device("cuda:0")
    x = torch.randn(1 << 24, device=device)  # 64 MB: ~30 us a copy, ~0.6 ms a replay of 20
    out = torch.empty_like(x)

    def call(i: int) -> None:
        out.copy_(x)

    full = time_cuda_graph(call, device, replays=30)
    assert full.count == 30
    budgeted = time_cuda_graph(call, device, replays=30, budget_ms=2.0, min_replays=5)
    assert 5 <= budgeted.count < 30, budgeted.count
    tiny = time_cuda_graph(call, device, replays=30, budget_ms=1e-6, min_replays=5)
    assert tiny.count == 5


@pytest.mark.gpu
def test_gpu_capture_warms_up_on_the_current_stream_after_settling() -> None:
    """The warm-up calls run on the stream the timed calls run on (no side stream of their own),
    the capture on another, the graph's results are the calls', and the process is settled in
    its lasting graph state once per device before its first capture."""
    device = torch.device("cuda:0")
    x = torch.randn(4096, device=device)
    outs = [torch.full_like(x, float("nan")) for _ in range(4)]
    streams: list[int] = []

    def call(i: int) -> None:
        streams.append(torch.cuda.current_stream(device).cuda_stream)
        torch.mul(x, float(i + 1), out=outs[i % 4])

    timing_stream = torch.cuda.current_stream(device).cuda_stream
    graph = capture_graph(call, device, calls=4, warmup=3)
    assert 0 in graph_timing._SETTLED_DEVICES
    assert streams[:3] == [timing_stream] * 3
    assert all(s != timing_stream for s in streams[3:]) and len(streams) == 7
    for out in outs:
        out.fill_(float("nan"))
    graph.replay()
    torch.cuda.synchronize(device)
    for k, out in enumerate(outs):
        torch.testing.assert_close(out, x * float(k + 1), rtol=0, atol=0)


def _second_look(
    monkeypatch: pytest.MonkeyPatch,
    first_ms: float,
    second_ms: float,
    cpu_time_ms: float | None = None,
    mode: str = "cpu_clock",
    floor_ms: float = 0.0,
) -> Any:
    """agreed_clock on a 10 us report timed in ``mode``, the judge's first clock ``first_ms`` a
    call and any later one ``second_ms``, the CPU-time clock ``cpu_time_ms`` (None: off the CPU);
    returns (clock, note, timing recorded) or the exception raised, and the spans asked for."""
    from kernelarena.evaluate.judge import judge_clock
    from kernelarena.evaluate.judge.crosscheck import JudgeClock, TimingRejected

    spans: list[float] = []

    def fake_clock(sets: Any, rotated: Any, reported: Any, span: float = 1.0) -> JudgeClock:
        spans.append(span)
        return JudgeClock(eager_call_ms=second_ms)

    def fake_cpu_time(sets: Any, rotated: Any) -> JudgeClock | None:
        return None if cpu_time_ms is None else JudgeClock(eager_call_ms=cpu_time_ms)

    monkeypatch.setattr(judge_clock, "judge_clock", fake_clock)
    monkeypatch.setattr(judge_clock, "cpu_time_clock", fake_cpu_time)
    reported = summarize([0.010] * 5, mode)
    try:
        result: Any = judge_clock.agreed_clock(
            None, [], reported, JudgeClock(eager_call_ms=first_ms), floor_ms=floor_ms
        )
    except TimingRejected as rejected:
        result = rejected
    return result, spans


def test_a_report_the_first_clock_contradicts_gets_a_longer_second_look(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    (clock, note, recorded), spans = _second_look(monkeypatch, first_ms=1.9, second_ms=0.012)
    assert clock.eager_call_ms == 0.012 and recorded.median_ms == 0.010
    assert spans == [10.0]
    assert "a second look agreed" in note and "1900 us" in note


def test_a_forged_time_is_rejected_by_the_second_look_too(monkeypatch: pytest.MonkeyPatch) -> None:
    from kernelarena.evaluate.judge.crosscheck import TimingRejected

    rejected, spans = _second_look(monkeypatch, first_ms=1.9, second_ms=1.8)
    assert isinstance(rejected, TimingRejected) and "1800 us" in str(rejected)
    assert spans == [10.0]


def test_on_a_busy_cpu_the_sandboxs_cpu_time_has_the_last_word(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Both wall clocks stretched by other programs (1.9 and 1.8 ms for a 10 us call): the CPU
    time the kernel counted for the sandbox (12 us a call) agrees, so the report stands, and the
    trace says why; a CPU time that does not agree (2 ms) still rejects a forged 10 us."""
    from kernelarena.evaluate.judge.crosscheck import TimingRejected

    (clock, note, _), spans = _second_look(monkeypatch, 1.9, 1.8, cpu_time_ms=0.012)
    assert clock.eager_call_ms == 0.012 and "the machine was busy" in note and spans == [10.0]
    rejected, _ = _second_look(monkeypatch, 1.9, 1.8, cpu_time_ms=2.0)
    assert isinstance(rejected, TimingRejected) and "2000 us" in str(rejected)


def test_an_event_timed_call_the_judge_finds_slower_gets_the_judges_figure(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A call that cannot be captured, timed with events at 10 us, that costs its caller 30 us
    (a host synchronization inside it: seen on an H100 for a published CUDA solution): not
    rejected, and the judge's figure, which holds the host's part too, is recorded; a forged
    timer gains nothing by it. Below the physical floor it is still rejected."""
    from kernelarena.evaluate.judge.crosscheck import TimingRejected

    (clock, note, recorded), _ = _second_look(monkeypatch, 0.031, 0.030, mode="cuda_events")
    assert recorded.median_ms == clock.eager_call_ms == 0.030
    assert recorded.mode == "cuda_events" and "the judge's figure recorded" in note
    rejected, _ = _second_look(monkeypatch, 0.031, 0.030, mode="cuda_events", floor_ms=0.1)
    assert isinstance(rejected, TimingRejected) and rejected.below_physics
    graph, _ = _second_look(monkeypatch, 0.031, 0.030, mode="cuda_graph")
    assert isinstance(graph, TimingRejected)


def test_an_agreeing_report_takes_no_second_look(monkeypatch: pytest.MonkeyPatch) -> None:
    (clock, note, _), spans = _second_look(monkeypatch, first_ms=0.011, second_ms=5.0)
    assert clock.eager_call_ms == 0.011 and note == "" and spans == []


def test_value_results_are_held_per_set_so_outputs_rotate_as_destinations_do() -> None:
    """A value-returning solution's result dropped at once would hand its memory to the next call
    (writes kept in the L2); held per set, as many results are alive as a destination-passing
    solution has output buffers, and each slot holds the latest call on its set."""

    alive: set[int] = set()

    class Result:
        def __init__(self, call: int) -> None:
            self.call = call
            alive.add(call)

        def __del__(self) -> None:
            alive.discard(self.call)

    held, results = held_per_set(Result, 3)
    returned = [held(i).call for i in range(10)]
    assert returned == list(range(10))
    assert alive == {7, 8, 9}
    assert [r.call for r in results] == [9, 7, 8]  # slot k: the latest call on set k


@pytest.fixture(autouse=True)
def _passes_unchecked(monkeypatch: pytest.MonkeyPatch) -> None:
    """The stand-in sandboxes below compute nothing: the checks of each pass (``pass_check``,
    tested through the engine) are left out of these tests of the clocks' arithmetic."""
    from kernelarena.evaluate.judge import judge_clock
    from kernelarena.evaluate.judge.verdicts import expect_success

    monkeypatch.setattr(judge_clock, "before_pass", lambda sets, timed: None)
    monkeypatch.setattr(
        judge_clock, "after_pass", lambda sets, timed, reply, what: expect_success(reply)
    )


class _Sandbox:
    """Answers "eager" requests with the host times given, one per request, and records them."""

    def __init__(self, host_ms: list[Any]) -> None:
        self.host_ms = list(host_ms)
        self.requests: list[tuple[Any, ...]] = []

    def request(self, *message: Any) -> dict[str, Any]:
        self.requests.append(message)
        host = self.host_ms.pop(0)
        return {"ok": True} if host is None else {"ok": True, "host_ms": host}


def _submit(host_ms: list[Any], eager_call_ms: float, sets: int = 2) -> tuple[Any, _Sandbox]:
    from types import SimpleNamespace

    from kernelarena.evaluate.judge.judge_clock import host_submit_ms

    sandbox = _Sandbox(host_ms)
    timed = [SimpleNamespace(id=i) for i in range(sets)]
    return host_submit_ms(SimpleNamespace(sandbox=sandbox), timed, eager_call_ms), sandbox  # type: ignore[arg-type]


def test_the_submit_time_is_the_least_burst_per_call_capped_by_the_judges_clock() -> None:
    from kernelarena.evaluate.judge.judge_clock import SUBMIT_BURST

    figure, sandbox = _submit([0.64, 0.32, 0.48], eager_call_ms=0.05)
    assert figure == pytest.approx(0.32 / SUBMIT_BURST)
    assert [m[:3] for m in sandbox.requests] == [("eager", [0, 1], SUBMIT_BURST)] * 3
    figure, _ = _submit([0.0, 0.0, 0.0], eager_call_ms=0.05)  # a forged 0 costs its claimant
    assert figure == 0.0
    figure, _ = _submit([9.0, 9.0, 9.0], eager_call_ms=0.05)  # never above the judge's eager time
    assert figure == 0.05
    figure, sandbox = _submit([6.4, 6.4, 6.4], eager_call_ms=0.1, sets=64)  # every set once
    assert sandbox.requests[0][2] == 64 and figure == pytest.approx(0.1)
    figure, sandbox = _submit([60.0, 60.0, 60.0], eager_call_ms=6.0)  # 25 ms a burst at most
    assert sandbox.requests[0][2] == 5 and figure == pytest.approx(6.0)


@pytest.mark.parametrize("claim", [None, -1.0, float("nan"), float("inf"), "1.0"])
def test_an_unusable_submit_claim_records_none(claim: Any) -> None:
    figure, sandbox = _submit([claim, 0.1, 0.1], eager_call_ms=0.05)
    assert figure is None and len(sandbox.requests) == 1


def _eager_batches(call_ms: float, sets: int, fixed_ms: float = 0.0) -> tuple[float, list[int]]:
    """eager_clock against a sandbox whose calls take ``call_ms``: (ms a call, calls per request)."""
    from types import SimpleNamespace

    from kernelarena.evaluate.judge.judge_clock import eager_clock

    asked: list[int] = []

    def request(kind: str, ids: list[int], calls: int) -> dict[str, Any]:
        asked.append(calls)
        time.sleep((fixed_ms + calls * call_ms) * 1e-3)
        return {"ok": True}

    sandbox = SimpleNamespace(request=request)
    timed = [SimpleNamespace(id=i) for i in range(sets)]
    holder = SimpleNamespace(sandbox=sandbox, device=torch.device("cpu"))
    return eager_clock(holder, timed), asked  # type: ignore[arg-type]


def test_the_judges_eager_batches_hold_at_least_the_minimum_of_calls() -> None:
    """A millisecond call would fill the 2 ms span in two calls, where the first launch and the
    last synchronization weigh as much as the difference between solutions; a call of 20 ms
    needs no more than the sets once."""
    from kernelarena.evaluate.judge.judge_clock import DIFFERENCE_BATCHES, EAGER_MIN_CALLS

    per_call, asked = _eager_batches(1.0, sets=3)
    # Whole rounds, at least EAGER_MIN_CALLS; then batches of that many and twice as many.
    assert asked == [3, 6, 12, 24] + [24, 48] * DIFFERENCE_BATCHES
    assert asked[3] >= EAGER_MIN_CALLS and per_call == pytest.approx(1.0, rel=0.5)
    per_call, asked = _eager_batches(20.0, sets=2)
    assert asked == [2] + [2, 4] * DIFFERENCE_BATCHES and per_call == pytest.approx(20.0, rel=0.5)


def test_a_difference_swamped_by_noise_is_never_zero() -> None:
    """A busy machine can make the batch of twice the calls come out faster than the shorter one:
    the pair is taken again, and where it stays inverted the figure is the longer batch's share
    (an upper bound), never the 0 that once ranked an honest solution first in apply."""
    from types import SimpleNamespace

    from kernelarena.evaluate.judge.judge_clock import (
        DIFFERENCE_BATCHES,
        DIFFERENCE_RETRIES,
        _per_call,
    )

    def clock_for(walls: list[float]) -> tuple[float, list[int]]:
        asked: list[int] = []
        remaining = list(walls)

        def request(kind: str, ids: list[int], calls: int) -> dict[str, Any]:
            asked.append(calls)
            time.sleep(remaining.pop(0) * 1e-3)
            return {"ok": True}

        holder = SimpleNamespace(
            sandbox=SimpleNamespace(request=request), device=torch.device("cpu")
        )
        timed = [SimpleNamespace(id=0)]
        figure = _per_call(holder, timed, lambda n: ("eager", [0], n), 4, "calls")  # type: ignore[arg-type]
        return figure, asked

    pairs = DIFFERENCE_BATCHES + DIFFERENCE_RETRIES
    always_inverted, asked = clock_for([30.0, 20.0] * pairs)
    assert len(asked) == 2 * pairs and always_inverted == pytest.approx(10.0, rel=0.3)
    righted, asked = clock_for([30.0, 20.0, 30.0, 20.0, 5.0, 40.0])
    assert len(asked) == 6 and righted == pytest.approx(15.0, rel=0.3)


def test_what_every_request_costs_besides_its_calls_is_not_in_the_eager_figure() -> None:
    """A request that costs 3 ms besides its calls of 0.5 ms (a round trip, a GPU warming its
    address translation after the judge's poison): the figure is the calls' alone."""
    per_call, _ = _eager_batches(0.5, sets=2, fixed_ms=3.0)
    assert per_call == pytest.approx(0.5, rel=0.3)


def test_the_eager_figure_keeps_the_lesser_of_two_looks() -> None:
    """A stall of the host over the first look's batches (here: every call takes 5 ms instead of
    1 while it lasts) does not stay in the figure apply ranks by; a second look that stalls does
    not raise a figure either."""
    from types import SimpleNamespace

    from kernelarena.evaluate.judge.crosscheck import JudgeClock
    from kernelarena.evaluate.judge.judge_clock import eager_clock, eager_second_look

    stalled = [True]

    def request(kind: str, ids: list[int], calls: int) -> dict[str, Any]:
        time.sleep(calls * (5.0 if stalled[0] else 1.0) * 1e-3)
        return {"ok": True}

    timed = [SimpleNamespace(id=i) for i in range(2)]
    holder: Any = SimpleNamespace(
        sandbox=SimpleNamespace(request=request),
        device=torch.device("cpu"),
    )
    first = JudgeClock(eager_call_ms=eager_clock(holder, timed), graph_call_ms=0.002)
    assert first.eager_call_ms == pytest.approx(5.0, rel=0.3)
    stalled[0] = False
    second = eager_second_look(holder, timed, first)
    assert second.eager_call_ms == pytest.approx(1.0, rel=0.5)
    assert second.graph_call_ms == first.graph_call_ms
    stalled[0] = True
    assert eager_second_look(holder, timed, second).eager_call_ms == second.eager_call_ms


def test_the_second_look_is_taken_where_the_eager_clock_reads_inflated() -> None:
    """Over 1.3x both the submit time and the GPU time (a stall of the host), or with no submit
    time at all: looked at again; an eager figure near the larger of the two is kept."""
    from kernelarena.evaluate.judge.crosscheck import JudgeClock
    from kernelarena.evaluate.judge.judge_clock import eager_inflated
    from kernelarena.evaluate.sandbox.timing import summarize

    gpu_bound = summarize([0.050], "cuda_graph")  # 50 us of GPU time a call
    host_bound = summarize([0.002], "cuda_graph")
    assert not eager_inflated(JudgeClock(eager_call_ms=0.052), 0.010, gpu_bound)
    assert not eager_inflated(JudgeClock(eager_call_ms=0.030), 0.028, host_bound)
    assert eager_inflated(JudgeClock(eager_call_ms=0.090), 0.028, gpu_bound)  # 1.8x the GPU time
    assert eager_inflated(JudgeClock(eager_call_ms=0.060), 0.028, host_bound)  # 2.1x the submit
    assert eager_inflated(JudgeClock(eager_call_ms=0.030), None, host_bound)


@pytest.mark.gpu
def test_the_timing_loops_take_back_any_l2_set_aside_for_persisting_lines() -> None:
    """A solution that sets an L2 set-aside (to mark its inputs persisting through the flush) has
    it taken back before the next timed call."""
    import ctypes

    from kernelarena.evaluate.sandbox.timing import reset_persisting_l2

    torch.cuda.synchronize()
    driver = ctypes.CDLL("libcuda.so.1")
    limit = 0x06  # CU_LIMIT_PERSISTING_L2_CACHE_SIZE
    assert driver.cuCtxSetLimit(limit, ctypes.c_size_t(4 << 20)) == 0
    value = ctypes.c_size_t(0)
    assert driver.cuCtxGetLimit(ctypes.byref(value), limit) == 0 and value.value > 0
    reset_persisting_l2()
    assert driver.cuCtxGetLimit(ctypes.byref(value), limit) == 0 and value.value == 0


def test_a_graph_of_no_work_is_not_rejected_for_the_judges_synchronization() -> None:
    """An empty batch's graph replays in 0.02 us a call; the judge's replay clock, one
    synchronization per batch, read 0.04 us on an H100. A ratio that wide at that scale hides
    nothing; the same ratio a microsecond up is still rejected."""
    from kernelarena.evaluate.judge.crosscheck import JudgeClock, TimingRejected, check_reported

    empty = summarize([0.019e-3] * 9, "cuda_graph")
    check_reported(empty, JudgeClock(eager_call_ms=0.01, graph_call_ms=0.042e-3), 0.0)
    forged = summarize([0.5e-3] * 9, "cuda_graph")
    with pytest.raises(TimingRejected):
        check_reported(forged, JudgeClock(eager_call_ms=0.01, graph_call_ms=1.2e-3), 0.0)
    events = summarize([0.019e-3] * 9, "cuda_events_l2_flush")
    check_reported(events, JudgeClock(eager_call_ms=0.2e-3), 0.0)
    with pytest.raises(TimingRejected):
        check_reported(events, JudgeClock(eager_call_ms=0.5e-3), 0.0)
