"""CPU traces in the report: checks, not rankings, after the GPUs, on a scale noise cannot set."""

from __future__ import annotations

from kernelarena.data import Environment, Performance, Status, Trace, TraceSet
from kernelarena.evaluate.options import make_trace
from kernelarena.report.html import build_report, figures
from kernelarena.report.html.views import collect
from tests.report.synthetic import H100, _stamped, definition, solution, timed, workload

CPU = "CPU x86_64"


def _cpu_trace(rows: int, latency_us: float) -> Trace:
    made, solved, shape = (
        definition("toy_norm"),
        solution("toy_norm", "torch", "python"),
        workload(rows, 4096),
    )
    performance = Performance(
        latency_ms=latency_us / 1e3,
        reference_latency_ms=latency_us / 2e3,
        speedup_factor=0.5,
        latency_p20_ms=latency_us / 2e3,
        latency_p80_ms=latency_us * 40 / 1e3,  # a shared CPU's spread
    )
    environment = Environment(hardware=CPU, device="cpu", ceilings={"copy_gbps": 5.0})
    trace = make_trace(made, solved, shape, environment, Status.PASSED, "", performance=performance)
    return _stamped(trace, "2026-11-20T00:00:00+00:00")


def _trace_set() -> TraceSet:
    made = TraceSet(root=None)
    made.add_definition(definition("toy_norm"), persist=False)
    made.add_solution(solution("toy_norm", "torch", "python"), persist=False)
    rows = [2**i for i in range(20)]
    # Twenty medians near a millisecond and one 70 ms spike, as a loaded two-core machine gives.
    made.traces["toy_norm"] = [
        _cpu_trace(r, 70_000.0 if r == 64 else 1000.0 + 10 * i) for i, r in enumerate(rows)
    ]
    made.traces["toy_norm"].append(
        timed(definition("toy_norm"), solution("toy_norm", "torch", "python"), workload(1, 4096),
              H100, 5.0)
    )  # fmt: skip
    return made


def test_the_cpu_latency_scale_is_set_by_the_medians_not_the_spikes() -> None:
    made = _trace_set()
    (results,) = collect(made, [made.definitions["toy_norm"]])
    cpu = results.by_hardware[CPU]
    assert list(results.by_hardware) == [H100, CPU] and cpu.on_cpu
    drawn = figures.performance_figure(results, cpu, {"toy_norm_torch": "#000"})
    assert drawn is not None
    low, high = drawn["layout"]["yaxis"]["range"]
    assert 10**high < 70_000 and 10**low < 1000, (low, high)  # the spike runs off the scale
    assert "noise spikes run off it" in drawn["layout"]["title"]["text"]
    assert not drawn["layout"].get("updatemenus")  # no GB/s or TFLOP/s from the CPU clock


def test_the_report_puts_gpus_first_and_shows_cpus_as_checks() -> None:
    made = _trace_set()
    html = build_report(made, [made.definitions["toy_norm"]]).html
    page = html[html.index('id="d-toy_norm"') :]
    assert page.index(f'data-hardware="{H100}"') < page.index(f'data-hardware="{CPU}"')
    cpu = page[page.index(f'data-hardware="{CPU}"') :]
    assert f"{CPU}: checks</h2>" in cpu and "CPU traces are checks, not rankings" in cpu
    assert "speedup over the reference" not in cpu and "0.50x" not in cpu
    summary = html[: html.index('id="d-toy_norm"')]
    assert summary.index(f'data-hardware="{H100}"') < summary.index(f'data-hardware="{CPU}"')
    assert "Library kernels against their peers on CPU" not in html
