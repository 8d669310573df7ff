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

# Solutions whose sources (or definition) changed and whose traces await re-measuring on an H100 and
# an H200 (scripts/gpu_stage.sh remeasure). Re-measured, a solution leaves this set (the test below
# fails while a listed solution matches its traces).
AWAITING_REMEASURE: set[str] = set()


def test_every_shipped_trace_matches_todays_definitions_solutions_and_workloads():
    library = load_library()
    workloads = {
        workload.uuid: workload for traces in library.workloads.values() for workload in traces
    }
    stale: Counter[str] = Counter()
    remeasured: set[str] = set()
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
            elif trace.solution in AWAITING_REMEASURE:
                remeasured.add(trace.solution)
    assert checked > 0, f"no traces found under {SHIPPED_TRACES}"
    stale = Counter({k: n for k, n in stale.items() if k.split(" / ")[1] not in AWAITING_REMEASURE})
    assert not stale, f"stale shipped traces (re-measure or drop them): {dict(stale)}"
    assert not remeasured, f"re-measured: take them out of AWAITING_REMEASURE: {sorted(remeasured)}"
    assert set(library.solutions) >= AWAITING_REMEASURE, (
        "AWAITING_REMEASURE names a solution that is gone"
    )


SHIPPED_GPUS = ("NVIDIA H100 80GB HBM3", "NVIDIA H200")
# Solutions no shipped GPU has a trace of, and why (a trace ships only when it PASSED).
UNMEASURED = {
    # FlashInfer's ragged FA3 kernel writes lse = -inf on a few rows that see keys (INCORRECT).
    "attention_prefill_varlen_bf16_flashinfer": "INCORRECT: lse -inf on rows with keys",
    "attention_prefill_varlen_fp16_flashinfer": "INCORRECT: lse -inf on rows with keys",
    # At batch 64 x 32k keys (8.6 GiB a set) an H100's 80 GB do not hold the judge's sets beside
    # the reference's and the solution's processes: those jobs are skipped as too large for the
    # device, and dispatch runs the fallback there. The H200 measures all of them.
    **{
        f"attention_decode_{dtype}_{solution}": "judge out of memory at batch 64 x 32k on an H100"
        for dtype in ("bf16", "fp16")
        for solution in ("triton", "flashinfer")
    },
}


def test_every_solution_has_a_trace_of_every_performance_workload_on_every_shipped_gpu():
    """A trace dropped as stale and never re-measured takes a kernel out of dispatch on that GPU
    without a word: every library solution ships a trace of each performance workload on each GPU
    the library ships traces for, or is named in ``UNMEASURED`` with the reason."""
    library = load_library()
    missing: Counter[str] = Counter()
    for definition_name in library.definitions:
        performance = [
            w.uuid
            for w in library.workloads.get(definition_name, [])
            if "performance" in (w.tags or [])
        ]
        measured = {
            (t.evaluation.environment.hardware, t.solution, t.workload.uuid)
            for t in library.traces.get(definition_name, [])
            if t.evaluation is not None
        }
        for solution in library.solutions.values():
            if solution.definition != definition_name or solution.name in UNMEASURED:
                continue
            for gpu in SHIPPED_GPUS:
                for uuid in performance:
                    if (gpu, solution.name, uuid) not in measured:
                        missing[f"{gpu} / {solution.name}"] += 1
    assert not missing, f"performance workloads without a shipped trace: {dict(missing)}"
    assert set(UNMEASURED) <= set(library.solutions), "UNMEASURED names a solution that is gone"
