"""The dispatch traces shipped with the library must describe today's code.

Dispatch admits a trace only when its content hashes equal today's definition, solution and
workload (kernelarena.dispatch.admit), so a trace left behind by a kernel change is silently
ignored and @apply stops considering that kernel on the hardware it was measured on. A change to a
library solution therefore ships fresh traces (``kernelarena run NAME --suite performance`` on the
GPU, see scripts/gpu_stage.sh) or drops the stale lines.
"""

from __future__ import annotations

from collections import Counter

from kernelarena.data import TraceHashes
from kernelarena.library import SHIPPED_TRACES, load_library


def test_every_shipped_trace_matches_todays_definitions_solutions_and_workloads():
    library = load_library()
    workloads = {
        workload.uuid: workload for traces in library.workloads.values() for workload in traces
    }
    stale: Counter[str] = Counter()
    checked = 0
    for definition_name, traces in library.traces.items():
        definition = library.definitions[definition_name]
        for trace in traces:
            checked += 1
            solution = library.solutions.get(trace.solution)
            workload = workloads.get(trace.workload.uuid)
            current = (
                solution is not None
                and workload is not None
                and trace.hashes == TraceHashes.of(definition, solution, workload)
            )
            if not current:
                stale[f"{definition_name} / {trace.solution}"] += 1
    assert checked > 0, f"no traces found under {SHIPPED_TRACES}"
    assert not stale, f"stale shipped traces (re-measure or drop them): {dict(stale)}"
