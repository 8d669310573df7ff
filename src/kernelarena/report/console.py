"""Tables for people: one per definition, solutions side by side per workload."""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Iterable, Sequence
from typing import Any

from rich import box
from rich.console import Console
from rich.table import Table
from rich.text import Text

from kernelarena.data import Definition, Solution, Trace, TraceSet, Workload


def workload_label(workload: Workload) -> str:
    axes = ", ".join(f"{k}={v}" for k, v in workload.axes.items())
    params = workload.params or {}
    extra = " ".join(f"{k}={v}" for k, v in params.items())
    return f"{axes} {extra}".strip() or workload.uuid[:8]


def _number(value: float | None, unit: str = "", digits: int = 3) -> str:
    if value is None:
        return ""
    if value != value:
        return "nan"
    return f"{value:.{digits}g}{unit}"


def _microseconds(value_ms: float) -> str:
    """``0.512``, ``12.3``, ``36790``: three figures, never an exponent."""
    value = value_ms * 1e3
    return f"{value:.3g}" if value < 100 else f"{value:.0f}"


def _latency(trace: Trace, checks_only: bool) -> list[str]:
    evaluation = trace.evaluation
    assert evaluation is not None
    performance = evaluation.performance
    if performance is None or not performance.latency_ms:
        return ["", ""] if checks_only else ["", "", "", ""]
    spread = ""
    if performance.latency_p20_ms is not None and performance.latency_p80_ms is not None:
        spread = (
            f"{_microseconds(performance.latency_p20_ms)}-"
            f"{_microseconds(performance.latency_p80_ms)}"
        )
    shown = [_microseconds(performance.latency_ms), spread]
    if checks_only:
        return shown
    speedup = f"{performance.speedup_factor:.2f}x" if performance.speedup_factor else ""
    fraction = performance.ceiling_fraction
    return [*shown, speedup, f"{fraction:.0%}" if fraction is not None else ""]


def run_tables(
    trace_set: TraceSet,
    traces: Iterable[Trace],
    skipped: Sequence[tuple[Any, str]],
    console: Console,
    *,
    checks_only: bool = False,
) -> None:
    """A table per definition; ``checks_only`` (a CPU run): no speedup or share of the ceiling,
    which the CPU's clock cannot tell."""
    by_definition: dict[str, list[Trace]] = defaultdict(list)
    for trace in traces:
        by_definition[trace.definition].append(trace)
    skipped_by_definition: dict[str, list[tuple[str, str]]] = defaultdict(list)
    for job, note in skipped:
        skipped_by_definition[job.definition.name].append((job.solution.name, note))
    for name in sorted(set(by_definition) | set(skipped_by_definition)):
        definition = trace_set.definitions.get(name)
        console.print(_definition_table(name, definition, by_definition.get(name, []), checks_only))
        notes = sorted(set(skipped_by_definition.get(name, [])))
        for solution, note in notes:
            console.print(
                f"  skipped {solution}: {note}", style="dim", markup=False, highlight=False
            )


def _definition_table(
    name: str, definition: Definition | None, traces: list[Trace], checks_only: bool
) -> Table:
    """Text columns fold to the terminal's width; number columns never wrap or shorten."""
    table = Table(
        title=f"{name}" + (f" ({definition.op_type})" if definition else "") + ", times in us",
        title_justify="left",
        box=box.SIMPLE_HEAD,
        pad_edge=False,
        padding=0,
        show_edge=False,
    )
    table.add_column("workload", overflow="fold", min_width=10, ratio=2)
    table.add_column("solution", overflow="fold", min_width=8, ratio=1)
    table.add_column("status", overflow="fold", min_width=6)
    numbers = ["abs err", "rel err", "median", "p20-p80"]
    numbers += [] if checks_only else ["speedup", "ceiling"]
    for column in numbers:
        table.add_column(column, justify="right", no_wrap=True)
    ordered = sorted(traces, key=lambda t: (workload_label(t.workload), t.solution or ""))
    previous = None
    for trace in ordered:
        evaluation = trace.evaluation
        assert evaluation is not None
        label = workload_label(trace.workload)
        correctness = evaluation.correctness
        short = (trace.solution or "").removeprefix(name + "_")
        status = evaluation.status.value
        table.add_row(
            label if label != previous else "",
            short,
            status,
            _number(correctness.max_absolute_error if correctness else None),
            _number(correctness.max_relative_error if correctness else None),
            *_latency(trace, checks_only),
            style=None if status == "PASSED" else "red",
        )
        previous = label
    return table


def failure_details(traces: Iterable[Trace], console: Console, limit: int = 20) -> None:
    failures = [t for t in traces if not t.passed]
    for trace in failures[:limit]:
        evaluation = trace.evaluation
        assert evaluation is not None
        # What the solution printed is appended after this marker; the verdict comes before it.
        first = evaluation.log.split("\n--- output ---", 1)[0].strip().splitlines()
        summary = first[-1] if first else ""
        if evaluation.status.value in (
            "INCORRECT_NUMERICAL",
            "INCORRECT_SHAPE",
            "INCORRECT_DTYPE",
            "TIMEOUT",
        ):
            summary = first[0] if first else ""
        line = Text(evaluation.status.value, style="red")
        line.append(f" {trace.solution} on {workload_label(trace.workload)}: {summary[:400]}")
        console.print(line)
    if len(failures) > limit:
        console.print(f"... and {len(failures) - limit} more failures (see the traces' logs)")


def language_counts(solutions: Iterable[Solution]) -> str:
    """'cuda:2 python:3 tilelang:1': the solutions' languages, each with its count."""
    counts = Counter(s.spec.language.value for s in solutions)
    return " ".join(f"{language}:{count}" for language, count in sorted(counts.items()))


def definitions_table(
    trace_set: TraceSet,
    names: Iterable[str] | None = None,
    title: str | None = None,
    width: int = 160,
) -> Table:
    """One row per definition (``names``, else all): how many solutions it has and in which
    languages, how many workloads and traces, and its axes; op_type and the signature too where
    the terminal is ``width`` wide enough for them (``kernelarena show NAME`` has everything)."""
    table = Table(title=title, title_justify="left", box=box.SIMPLE_HEAD, pad_edge=False)
    table.add_column("name", no_wrap=True)
    table.add_column("solutions", justify="right", no_wrap=True)
    table.add_column("languages", overflow="fold")
    for column in ("workloads", "traces"):
        table.add_column(column, justify="right", no_wrap=True)
    wide = width >= 120
    if wide:
        table.add_column("op_type", no_wrap=True)
    table.add_column("axes", overflow="fold")
    if width >= 160:
        table.add_column("inputs -> outputs", overflow="fold")
    for name in sorted(trace_set.definitions if names is None else names):
        definition = trace_set.definitions[name]
        axes = ", ".join(
            f"{a}={spec.value}"
            if spec.type == "const"
            else (f"{a}={spec.expression}" if getattr(spec, "expression", None) else a)
            for a, spec in definition.axes.items()
        )
        solutions = trace_set.solutions_for(name)
        row = [
            name,
            str(len(solutions)),
            language_counts(solutions),
            str(len(trace_set.workloads.get(name, []))),
            str(len(trace_set.traces.get(name, []))),
            *([definition.op_type] if wide else []),
            axes,
        ]
        if width >= 160:
            row.append(f"{', '.join(definition.inputs)} -> {', '.join(definition.outputs)}")
        table.add_row(*row)
    return table
