"""Tables for people: one per definition, solutions side by side per workload."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Sequence
from typing import Any

from rich.console import Console
from rich.table import Table

from kernelarena.data import Definition, Trace, TraceSet, Workload


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


def _latency(trace: Trace) -> tuple[str, str, str, str]:
    evaluation = trace.evaluation
    assert evaluation is not None
    performance = evaluation.performance
    if performance is None:
        return "", "", "", ""
    latency = performance.latency_ms * 1e3
    spread = ""
    if performance.latency_p20_ms is not None and performance.latency_p80_ms is not None:
        spread = f"{performance.latency_p20_ms * 1e3:.4g}-{performance.latency_p80_ms * 1e3:.4g}"
    speedup = f"{performance.speedup_factor:.2f}x" if performance.speedup_factor else ""
    fraction = performance.ceiling_fraction
    return f"{latency:.4g}", spread, speedup, f"{fraction:.0%}" if fraction is not None else ""


def run_tables(
    trace_set: TraceSet,
    traces: Iterable[Trace],
    skipped: Sequence[tuple[Any, str]],
    console: Console,
) -> None:
    by_definition: dict[str, list[Trace]] = defaultdict(list)
    for trace in traces:
        by_definition[trace.definition].append(trace)
    skipped_by_definition: dict[str, list[tuple[str, str]]] = defaultdict(list)
    for job, note in skipped:
        skipped_by_definition[job.definition.name].append((job.solution.name, note))
    for name in sorted(set(by_definition) | set(skipped_by_definition)):
        definition = trace_set.definitions.get(name)
        console.print(_definition_table(name, definition, by_definition.get(name, [])))
        notes = sorted(set(skipped_by_definition.get(name, [])))
        for solution, note in notes:
            console.print(f"  skipped {solution}: {note}", style="dim")


def _definition_table(name: str, definition: Definition | None, traces: list[Trace]) -> Table:
    table = Table(
        title=f"{name}" + (f" ({definition.op_type})" if definition else ""), title_justify="left"
    )
    for column in (
        "workload",
        "solution",
        "status",
        "max abs err",
        "max rel err",
        "median us",
        "p20-p80 us",
        "speedup",
        "of ceiling",
    ):
        table.add_column(
            column, justify="left" if column in ("workload", "solution", "status") else "right"
        )
    ordered = sorted(traces, key=lambda t: (workload_label(t.workload), t.solution or ""))
    previous = None
    for trace in ordered:
        evaluation = trace.evaluation
        assert evaluation is not None
        label = workload_label(trace.workload)
        correctness = evaluation.correctness
        short = (trace.solution or "").removeprefix(name + "_")
        status = evaluation.status.value
        style = None if status == "PASSED" else "red"
        table.add_row(
            label if label != previous else "",
            short,
            status,
            _number(correctness.max_absolute_error if correctness else None),
            _number(correctness.max_relative_error if correctness else None),
            *_latency(trace),
            style=style,
        )
        previous = label
    return table


def failure_details(traces: Iterable[Trace], console: Console, limit: int = 20) -> None:
    failures = [t for t in traces if not t.passed]
    for trace in failures[:limit]:
        evaluation = trace.evaluation
        assert evaluation is not None
        first = evaluation.log.strip().splitlines()
        summary = first[-1] if first else ""
        if evaluation.status.value in (
            "INCORRECT_NUMERICAL",
            "INCORRECT_SHAPE",
            "INCORRECT_DTYPE",
            "TIMEOUT",
        ):
            summary = first[0] if first else ""
        console.print(
            f"[red]{evaluation.status.value}[/red] {trace.solution} on {workload_label(trace.workload)}: {summary[:400]}"
        )
    if len(failures) > limit:
        console.print(f"... and {len(failures) - limit} more failures (see the traces' logs)")


def definitions_table(trace_set: TraceSet) -> Table:
    table = Table(title="definitions", title_justify="left")
    for column in (
        "name",
        "op_type",
        "axes",
        "inputs -> outputs",
        "solutions",
        "workloads",
        "traces",
    ):
        table.add_column(column, no_wrap=column == "name")
    for name, definition in sorted(trace_set.definitions.items()):
        axes = ", ".join(
            f"{a}={spec.value}"
            if spec.type == "const"
            else (f"{a}={spec.expression}" if getattr(spec, "expression", None) else a)
            for a, spec in definition.axes.items()
        )
        signature = f"{', '.join(definition.inputs)} -> {', '.join(definition.outputs)}"
        table.add_row(
            name,
            definition.op_type,
            axes,
            signature,
            str(len(trace_set.solutions_for(name))),
            str(len(trace_set.workloads.get(name, []))),
            str(len(trace_set.traces.get(name, []))),
        )
    return table
