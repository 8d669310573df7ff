"""Whose traces an apply table is built from: the hardware's own, else the nearest measured model
of the same architecture (``hardware.donors``), else none (every call runs the fallback).

Own traces always win: a definition with any admitted trace of this hardware is decided by those
alone, also where a borrowed model measured more shapes (``kernelarena tune`` fills the rest). A
CPU never borrows: its traces are of Python solutions on one machine's cores.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from kernelarena.data import Definition, Trace, TraceSet
from kernelarena.dispatch.admit import admitted_timings
from kernelarena.dispatch.table import Key, Measurement
from kernelarena.runtime.hardware import HardwareProfile, donors, recorded_profile


def measured_profiles(traces: Iterable[Trace]) -> list[HardwareProfile]:
    """Every model with passed traces among ``traces``, described by what they recorded."""
    environments: dict[str, list[Any]] = {}
    for trace in traces:
        if trace.passed and trace.evaluation is not None:
            environment = trace.evaluation.environment
            environments.setdefault(environment.hardware, []).append(environment)
    return [recorded_profile(name, found) for name, found in sorted(environments.items())]


def sourced_timings(
    definition: Definition,
    trace_set: TraceSet,
    target: HardwareProfile,
    device_kind: str,
) -> tuple[dict[Key, list[Measurement]], str | None]:
    """The admitted timings that decide for ``target``, and the model they were borrowed from
    (None: its own, or nothing at all)."""
    solutions = {s.name: s for s in trace_set.solutions_for(definition.name)}
    workloads = {w.uuid: w for w in trace_set.workloads_for(definition.name)}
    traces = trace_set.traces.get(definition.name, [])

    def admitted(hardware: str) -> dict[Key, list[Measurement]]:
        return admitted_timings(definition, solutions, workloads, traces, hardware, device_kind)

    own = admitted(target.name)
    if own or device_kind != "cuda":
        return own, None
    for donor in donors(target, measured_profiles(traces)):
        borrowed = admitted(donor.name)
        if borrowed:  # a model whose traces are all stale lends nothing: the next one may
            return borrowed, donor.name
    return {}, None
