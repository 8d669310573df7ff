"""The built-in operators, loaded as an in-memory TraceSet (plus the traces shipped with them)."""

from __future__ import annotations

import importlib
import pkgutil
from functools import lru_cache
from pathlib import Path

from kernelarena.data import TraceSet
from kernelarena.library._spec import OperatorSpec

LIBRARY_FOLDER = Path(__file__).parent
SHIPPED_TRACES = LIBRARY_FOLDER / "traces"


def operator_specs() -> list[OperatorSpec]:
    specs = []
    for module in pkgutil.iter_modules([str(LIBRARY_FOLDER)]):
        if module.name.startswith("_") or not module.ispkg or module.name == "traces":
            continue
        loaded = importlib.import_module(f"{__name__}.{module.name}")
        spec = getattr(loaded, "OPERATOR", None)
        if isinstance(spec, OperatorSpec):
            specs.append(spec)
    return sorted(specs, key=lambda s: s.name)


@lru_cache(maxsize=1)
def _library() -> TraceSet:
    trace_set = TraceSet(root=None)
    for spec in operator_specs():
        definitions = {d.name: d for d in spec.definitions()}
        for variant in spec.variants:
            definition = definitions[spec.definition_name(variant)]
            trace_set.add_definition(definition, persist=False)
            for solution in spec.solutions_for(variant):
                trace_set.add_solution(solution, persist=False)
            for workload in spec.workloads_for(variant, definition):
                trace_set.add_workload(definition.name, workload, persist=False)
    if SHIPPED_TRACES.is_dir():
        for path in sorted(SHIPPED_TRACES.rglob("*.jsonl")):
            for _, trace in trace_set._read_jsonl(path, SHIPPED_TRACES):
                trace_set.traces.setdefault(trace.definition, []).append(trace)
    return trace_set


def load_library() -> TraceSet:
    """A fresh copy of the built-in library (callers may add to it freely)."""
    built = _library()
    copy = TraceSet(root=None)
    copy.merge(built)
    return copy
