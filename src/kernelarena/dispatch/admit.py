"""Which traces count for an apply table: rules 1 to 3 of ``table.py``.

Admitted: PASSED with a performance record taken without compiling, on the given hardware, with
content hashes equal to today's definition, solution and workload (a workload no longer in the
dataset is checked against the copy inside the trace); on a CPU only Python solutions that target
``cpu``. Then one measurement per (shape key, solution): per workload the latest trace, across
workloads at one key the median of their medians, p20s, p80s, eager per-call times and host
submit times.

"Without compiling": a trace whose performance says that dynamo compiled while it was timed
(``compiles_while_timed`` above zero, recorded by an evaluator that counts
``kernelarena.library.per_shape.dynamo_compile_attempts`` around the timed span) timed a compile, not
the solution, and is left out.
"""

from __future__ import annotations

import statistics
from collections.abc import Iterable, Mapping, Sequence

from kernelarena.data import Definition, Language, Solution, Trace, Workload
from kernelarena.data.definition import AxisError
from kernelarena.data.expressions import ExpressionError
from kernelarena.dispatch.table import Key, Measurement, workload_key


def admitted_for_device(solution: Solution, device_kind: str) -> bool:
    if device_kind == "cpu":
        return solution.spec.language is Language.PYTHON and solution.runs_on("cpu")
    return solution.runs_on("cuda") or solution.spec.language in (Language.CUDA, Language.CPP)


def admitted_timings(
    definition: Definition,
    solutions: Mapping[str, Solution],
    workloads: Mapping[str, Workload],
    traces: Iterable[Trace],
    hardware: str,
    device_kind: str,
) -> dict[Key, list[Measurement]]:
    """Rules 1-3: the measurements that count, one per (key, solution)."""
    definition_hash = definition.content_hash()
    solution_hashes = {
        n: s.content_hash() for n, s in solutions.items() if admitted_for_device(s, device_kind)
    }
    workload_hashes: dict[str, str] = {}
    latest: dict[tuple[str, str], Trace] = {}
    for trace in traces:
        evaluation, hashes = trace.evaluation, trace.hashes
        if not trace.passed or evaluation is None or evaluation.performance is None:
            continue
        if evaluation.performance.timing_mode == "not_timed":  # checked with --no-timing only
            continue
        if getattr(evaluation.performance, "compiles_while_timed", None):
            continue
        if evaluation.environment.hardware != hardware or hashes is None:
            continue
        if trace.solution not in solution_hashes or hashes.definition != definition_hash:
            continue
        if hashes.solution != solution_hashes[trace.solution]:
            continue
        uuid = trace.workload.uuid
        if uuid not in workload_hashes:
            current = workloads.get(uuid, trace.workload)
            workload_hashes[uuid] = current.content_hash()
        if hashes.workload != workload_hashes[uuid]:
            continue
        slot = (trace.solution, uuid)
        if slot not in latest or evaluation.timestamp >= _timestamp(latest[slot]):
            latest[slot] = trace
    grouped: dict[tuple[Key, str], list[Trace]] = {}
    for (solution, _), trace in latest.items():
        try:
            key = workload_key(definition, trace.workload)
        except (AxisError, ExpressionError):
            continue
        grouped.setdefault((key, solution), []).append(trace)
    table: dict[Key, list[Measurement]] = {}
    for (key, solution), group in grouped.items():
        table.setdefault(key, []).append(_combine(solution, group))
    return table


def _timestamp(trace: Trace) -> str:
    assert trace.evaluation is not None
    return trace.evaluation.timestamp


def _combine(solution: str, traces: Sequence[Trace]) -> Measurement:
    medians, lows, highs, eager, host = [], [], [], [], []
    capturable = True
    for trace in traces:
        assert trace.evaluation is not None and trace.evaluation.performance is not None
        performance = trace.evaluation.performance
        medians.append(performance.latency_ms)
        lows.append(_or(performance.latency_p20_ms, performance.latency_ms))
        highs.append(_or(performance.latency_p80_ms, performance.latency_ms))
        if performance.eager_call_ms is not None:
            eager.append(performance.eager_call_ms)
        if performance.host_submit_ms is not None:
            host.append(performance.host_submit_ms)
        capturable = capturable and performance.capturable is not False
    # Eager and host figures only when every workload at the key has one: a median over some of
    # them is no figure for the key.
    return Measurement(
        solution=solution,
        median_ms=statistics.median(medians),
        p20_ms=statistics.median(lows),
        p80_ms=statistics.median(highs),
        eager_ms=statistics.median(eager) if len(eager) == len(traces) else None,
        host_ms=statistics.median(host) if len(host) == len(traces) else None,
        workloads=len(traces),
        capturable=capturable,
    )


def _or(value: float | None, default: float) -> float:
    return default if value is None else value
