"""What the report shows, as plain data: per definition and hardware model, the latest trace of every
(solution, workload), split into timed points and failures, and where each trace came from.

Only the latest trace of a (hardware, solution, workload) slot counts, as in apply's tables: a re-run
replaces an earlier figure, and a solution that failed once and passes now is shown as passing.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

from kernelarena.data import Definition, Solution, Trace, TraceSet
from kernelarena.report.console import workload_label

LOG_LINES = 8  # first lines of a failure's log shown in the report
LOG_CHARACTERS = 1200


@dataclass(frozen=True)
class Point:
    """One passed, timed trace: a solution on a workload."""

    solution: str
    workload: str
    label: str
    axes: dict[str, int]
    latency_us: float
    p20_us: float | None
    p80_us: float | None
    reference_us: float | None
    speedup: float | None
    gbps: float | None
    tflops: float | None
    ceiling_fraction: float | None


@dataclass(frozen=True)
class Failure:
    solution: str
    label: str
    status: str
    log_head: str
    timestamp: str


@dataclass
class Provenance:
    """Where the traces of one hardware model came from: devices, library versions, ceilings."""

    hardware: str
    devices: set[str] = field(default_factory=set)
    libs: dict[str, set[str]] = field(default_factory=dict)
    copy_gbps: list[float] = field(default_factory=list)
    matmul_tflops: list[float] = field(default_factory=list)
    traces: int = 0
    outdated: int = 0  # of a solution in the dataset whose code (or definition, workload) changed
    unknown: int = 0  # of a solution not in the dataset (registered from Python, say)
    first: str = ""
    last: str = ""


@dataclass
class HardwareResults:
    """Everything measured of one definition on one hardware model."""

    hardware: str
    on_cpu: bool = False  # CPU traces are checks: their times rank nothing
    points: list[Point] = field(default_factory=list)
    failures: list[Failure] = field(default_factory=list)
    solutions: list[str] = field(default_factory=list)  # every solution with a trace, sorted
    passed: dict[str, int] = field(default_factory=dict)
    failed: dict[str, int] = field(default_factory=dict)


@dataclass
class DefinitionResults:
    definition: Definition
    solutions: dict[str, Solution]  # the dataset's solutions of this definition, by name
    by_hardware: dict[str, HardwareResults]
    provenance: dict[str, Provenance]

    @property
    def name(self) -> str:
        return self.definition.name

    def short(self, solution: str) -> str:
        return solution.removeprefix(self.name + "_")


def latest_traces(traces: Iterable[Trace]) -> list[Trace]:
    """The latest trace per (hardware, solution, workload); workload-only records dropped."""
    latest: dict[tuple[str, str, str], Trace] = {}
    for trace in traces:
        if trace.evaluation is None or trace.solution is None:
            continue
        slot = (trace.evaluation.environment.hardware, trace.solution, trace.workload.uuid)
        kept = latest.get(slot)
        if kept is None or _timestamp(trace) >= _timestamp(kept):
            latest[slot] = trace
    return list(latest.values())


def _timestamp(trace: Trace) -> str:
    return trace.evaluation.timestamp if trace.evaluation is not None else ""


def collect(
    trace_set: TraceSet, definitions: Sequence[Definition], hardware: Sequence[str] | None = None
) -> list[DefinitionResults]:
    """Results of ``definitions`` (those with at least one trace), limited to ``hardware`` models
    when given."""
    collected = []
    for definition in sorted(definitions, key=lambda d: d.name):
        traces = [
            t
            for t in latest_traces(trace_set.traces.get(definition.name, []))
            if hardware is None or _hardware(t) in hardware
        ]
        if not traces:
            continue
        solutions = {s.name: s for s in trace_set.solutions_for(definition.name)}
        collected.append(_definition_results(definition, solutions, traces, trace_set))
    return collected


def _hardware(trace: Trace) -> str:
    assert trace.evaluation is not None
    return trace.evaluation.environment.hardware


def _definition_results(
    definition: Definition,
    solutions: dict[str, Solution],
    traces: list[Trace],
    trace_set: TraceSet,
) -> DefinitionResults:
    by_hardware: dict[str, HardwareResults] = {}
    provenance: dict[str, Provenance] = {}
    today = _TodayHashes(definition, solutions, trace_set)
    for trace in sorted(traces, key=lambda t: (workload_label(t.workload), t.solution or "")):
        model = _hardware(trace)
        results = by_hardware.setdefault(model, HardwareResults(model, on_cpu=is_cpu(trace)))
        _add_trace(results, trace)
        _note_provenance(provenance.setdefault(model, Provenance(model)), trace, today.state(trace))
    for results in by_hardware.values():
        results.solutions = sorted(set(results.passed) | set(results.failed))
    order = sorted(by_hardware, key=lambda m: (by_hardware[m].on_cpu, m))  # GPUs first
    return DefinitionResults(
        definition,
        solutions,
        {m: by_hardware[m] for m in order},
        {m: provenance[m] for m in order},
    )


def is_cpu(trace: Trace) -> bool:
    assert trace.evaluation is not None
    environment = trace.evaluation.environment
    return (environment.device or "").startswith("cpu") or environment.hardware.startswith("CPU")


def _add_trace(results: HardwareResults, trace: Trace) -> None:
    evaluation = trace.evaluation
    assert evaluation is not None and trace.solution is not None
    solution = trace.solution
    if not trace.passed:
        results.failed[solution] = results.failed.get(solution, 0) + 1
        results.failures.append(
            Failure(
                solution,
                workload_label(trace.workload),
                evaluation.status.value,
                log_head(evaluation.log),
                evaluation.timestamp,
            )
        )
        return
    results.passed[solution] = results.passed.get(solution, 0) + 1
    performance = evaluation.performance
    if performance is None or performance.latency_ms <= 0:
        return  # checked with --no-timing: counted as passed, nothing to plot
    results.points.append(
        Point(
            solution=solution,
            workload=trace.workload.uuid,
            label=workload_label(trace.workload),
            axes=dict(trace.workload.axes),
            latency_us=performance.latency_ms * 1e3,
            p20_us=_us(performance.latency_p20_ms),
            p80_us=_us(performance.latency_p80_ms),
            reference_us=_us(performance.reference_latency_ms or None),
            speedup=performance.speedup_factor or None,
            gbps=performance.achieved_gbps,
            tflops=performance.achieved_tflops,
            ceiling_fraction=performance.ceiling_fraction,
        )
    )


def _us(value_ms: float | None) -> float | None:
    return None if value_ms is None else value_ms * 1e3


def log_head(log: str, lines: int = LOG_LINES, characters: int = LOG_CHARACTERS) -> str:
    """The first non-empty lines of a log, cut to a size a page can show."""
    kept = [line.rstrip() for line in log.strip().splitlines() if line.strip()][:lines]
    text = "\n".join(kept)
    return text if len(text) <= characters else text[: characters - 3] + "..."


class _TodayHashes:
    """Today's content hashes of a definition, its solutions and workloads, each computed once."""

    def __init__(self, definition: Definition, solutions: dict[str, Solution], trace_set: TraceSet):
        self.definition = definition.content_hash()
        self.solutions = {name: s.content_hash() for name, s in solutions.items()}
        self.workloads = {
            w.uuid: w.content_hash() for w in trace_set.workloads.get(definition.name, [])
        }

    def state(self, trace: Trace) -> str:
        """'current' when the trace describes today's code, 'outdated' when its definition,
        solution or workload changed since (apply ignores those; so does one without hashes),
        'unknown' when its solution is not in the dataset (registered from Python and not
        imported): nothing to compare with. A workload no longer in the dataset is checked
        against the copy inside the trace, as apply does."""
        solution = self.solutions.get(trace.solution or "")
        if solution is None:
            return "unknown"
        hashes = trace.hashes
        workload = self.workloads.get(trace.workload.uuid) or trace.workload.content_hash()
        today = (self.definition, solution, workload)
        if hashes is None or (hashes.definition, hashes.solution, hashes.workload) != today:
            return "outdated"
        return "current"


def _note_provenance(provenance: Provenance, trace: Trace, state: str) -> None:
    evaluation = trace.evaluation
    assert evaluation is not None
    environment = evaluation.environment
    provenance.traces += 1
    provenance.outdated += state == "outdated"
    provenance.unknown += state == "unknown"
    if environment.device:
        provenance.devices.add(environment.device)
    for library, version in environment.libs.items():
        provenance.libs.setdefault(library, set()).add(version)
    ceilings = environment.ceilings or {}
    if ceilings.get("copy_gbps"):
        provenance.copy_gbps.append(ceilings["copy_gbps"])
    if ceilings.get("matmul_tflops"):
        provenance.matmul_tflops.append(ceilings["matmul_tflops"])
    stamp = evaluation.timestamp
    provenance.first = min(provenance.first or stamp, stamp)
    provenance.last = max(provenance.last, stamp)


def hardware_models(trace_set: TraceSet, wanted: list[str] | None) -> list[str] | None:
    """Each ``--hardware`` as the models it names: an exact name, else every model whose name
    holds it (case aside)."""
    if not wanted:
        return None
    known = sorted(
        {
            t.evaluation.environment.hardware
            for traces in trace_set.traces.values()
            for t in traces
            if t.evaluation is not None
        }
    )
    chosen: list[str] = []
    for name in wanted:
        matches = [name] if name in known else [k for k in known if name.lower() in k.lower()]
        if not matches:
            raise ValueError(
                f"--hardware '{name}' matches no hardware model of the traces; they come from: "
                f"{', '.join(known) or 'none'}"
            )
        chosen += [m for m in matches if m not in chosen]
    return chosen
