"""Ahead-of-time builds: every solution an apply table can choose, built into the build cache
before the program that uses apply starts, so its first call pays no compile.

What "built" means per language: CUDA/C++ is compiled (for the solution's target, sm_90a, also on
a machine without a GPU); Python and Triton sources are written to the cache and imported. Triton
compiles a kernel on its first launch for the shapes' specializations: with a GPU here and
``warm``, each of the library's winners is called once on inputs of a workload it won, which
fills Triton's and torch.compile's caches as well. Those inputs are drawn by kernelarena's own
code: a definition's ``make_inputs`` shapes them only where its reference is the library's own,
since a dataset's reference runs only in a sandbox (``evaluate.judge.references``); a winner whose
definition has another ``make_inputs`` is left unwarmed. CUDA and C++ solutions are compiled first by
the ``pool`` the caller passes (the command line passes the build pool's, ``evaluate.executors.build_pool``:
in parallel, each build confined, failures cached with their error). A solution from outside the
library is built by the ``confined`` builder the caller passes (the command line passes the
sandbox's, ``evaluate.sandbox.confined_build``: dispatch sits below evaluate) and never warmed; without
one it is skipped, since nothing outside the library is built unconfined.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import torch

from kernelarena.compile import (
    LIBRARY_NAMESPACE,
    BuildError,
    DependencyMissing,
    Runnable,
    build_solution,
    namespace_of,
)
from kernelarena.data import Definition, Solution, Trace, TraceSet
from kernelarena.data.workload_checks import defines_make_inputs
from kernelarena.dispatch.runtime import describe_device
from kernelarena.dispatch.store import load_or_build
from kernelarena.dispatch.table import ApplyTable, workload_key
from kernelarena.library import load_library
from kernelarena.runtime.hardware import hardware_name
from kernelarena.runtime.inputs import allocate_outputs, generate_inputs, load_reference, seed_for

# Builds a solution from outside the library confined, on a device; answers as the sandbox does:
# ``ok`` (with ``metadata``), ``skipped``, ``build_error`` or ``error``.
ConfinedBuild = Callable[[Definition, Solution, str], dict[str, Any]]
# Builds many solutions ahead, on a device: by solution name, an outcome with ``status`` (built,
# failed, skipped, unbuilt: left to the builders here) and ``brief`` (evaluate.executors.build_pool's).
PoolBuild = Callable[[list[tuple[Definition, Solution]], str], dict[str, Any]]


@dataclass(frozen=True)
class Built:
    definition: str
    solution: str
    hardware: str
    status: Literal["built", "warmed", "skipped", "failed"]
    detail: str = ""


def measured_hardware(trace_set: TraceSet, definition: Definition) -> list[str]:
    """Hardware models with passed traces of ``definition``."""
    found = {
        t.evaluation.environment.hardware
        for t in trace_set.traces.get(definition.name, [])
        if t.passed and t.evaluation is not None
    }
    return sorted(found)


def device_kind_of(hardware: str) -> str:
    return "cpu" if hardware == hardware_name(torch.device("cpu")) else "cuda"


def winners(*tables: ApplyTable) -> list[str]:
    """Every solution the tables can choose: each key's winner and the definition-wide best."""
    chosen = {entry.winner for table in tables for entry in table.entries}
    chosen |= {t.definition_best for t in tables if t.definition_best is not None}
    return sorted(chosen)


def tables_for(
    trace_set: TraceSet, definition: Definition, hardware: str, device: str | None = None
) -> tuple[ApplyTable, ApplyTable]:
    """The tables apply consults for ``hardware``, ranked by eager call time and by GPU time
    (inside graph capture); ``device``: the device of that model here, whose properties say whose
    traces it borrows better than its name."""
    profile = None
    if device is not None and device.startswith("cuda"):
        described = describe_device(torch.device(device))
        profile = described if described.name == hardware else None
    kind = device_kind_of(hardware)
    return (
        load_or_build(definition, trace_set, hardware, kind, rank_by="eager", profile=profile),
        load_or_build(definition, trace_set, hardware, kind, rank_by="gpu", profile=profile),
    )


def build_winners(
    trace_set: TraceSet,
    definitions: Sequence[Definition],
    hardware: Sequence[str] | None = None,
    *,
    only_winners: bool = True,
    warm: bool = False,
    device: str | None = None,
    confined: ConfinedBuild | None = None,
    pool: PoolBuild | None = None,
) -> list[Built]:
    """Build the winners (or every solution) of ``definitions`` for each hardware model: the one
    named, else this GPU's, else every model the traces measured (none measured and every
    solution asked for: this device's). ``pool`` builds them ahead where it can; solutions from
    outside the library go to ``confined`` otherwise, and are skipped without it."""
    device = device or ("cuda:0" if torch.cuda.is_available() else "cpu")
    here = [hardware_name(torch.device(device))] if device.startswith("cuda") else []
    wanted: list[tuple[Definition, str, str, tuple[ApplyTable, ApplyTable]]] = []
    for definition in definitions:
        models = list(hardware or here or measured_hardware(trace_set, definition))
        if not models and not only_winners:
            models = [hardware_name(torch.device(device))]
        for model in models:
            tables = tables_for(trace_set, definition, model, device)
            names = (
                winners(*tables)
                if only_winners
                else [s.name for s in trace_set.solutions_for(definition.name)]
            )
            wanted += [(definition, name, model, tables) for name in names]
    pairs = {
        name: (definition, trace_set.solutions[name])
        for definition, name, _, _ in wanted
        if name in trace_set.solutions
    }
    pooled = pool(list(pairs.values()), device) if pool is not None and pairs else {}
    return [
        _build_one(
            trace_set, definition, name, model, tables, device, warm, confined, pooled.get(name)
        )
        for definition, name, model, tables in wanted
    ]


def _build_one(
    trace_set: TraceSet,
    definition: Definition,
    name: str,
    hardware: str,
    tables: tuple[ApplyTable, ...],
    device: str,
    warm: bool,
    confined: ConfinedBuild | None,
    pooled: Any = None,
) -> Built:
    solution = trace_set.solutions.get(name)
    if solution is None:
        return Built(definition.name, name, hardware, "skipped", "not in the dataset")
    library = namespace_of(solution) == LIBRARY_NAMESPACE
    if pooled is not None and pooled.status != "unbuilt":  # else built here, as without a pool
        if pooled.status in ("failed", "skipped"):
            return Built(definition.name, name, hardware, pooled.status, pooled.brief)
        if not (library and warm and device.startswith("cuda") and pooled.status == "built"):
            return Built(definition.name, name, hardware, "built", pooled.brief)
    if not library:
        if confined is None:
            why = "from outside the library: built only confined (kernelarena build)"
            return Built(definition.name, name, hardware, "skipped", why)
        return _built_confined(confined, definition, solution, hardware, device)
    try:
        runnable = build_solution(definition, solution, device)
    except DependencyMissing as error:
        return Built(definition.name, name, hardware, "skipped", str(error))
    except BuildError as error:
        return Built(definition.name, name, hardware, "failed", str(error)[:300])
    detail = runnable.artifact or ""
    if not (warm and device.startswith("cuda")):
        return Built(definition.name, name, hardware, "built", detail)
    trace = _won_trace(trace_set, definition, name, tables)
    if trace is None:
        return Built(definition.name, name, hardware, "built", detail)
    try:
        blob_root = trace_set.blob_roots.get(trace.workload.uuid, trace_set.root)
        left_out = _call_once(runnable, trace, torch.device(device), blob_root)
    except Exception as error:  # the build stands; warming is a courtesy
        return Built(definition.name, name, hardware, "built", f"warm-up failed: {error}"[:300])
    if left_out:
        return Built(definition.name, name, hardware, "built", left_out)
    return Built(definition.name, name, hardware, "warmed", detail)


def _built_confined(
    confined: ConfinedBuild, definition: Definition, solution: Solution, hardware: str, device: str
) -> Built:
    """A solution from outside the library, built confined, never warmed."""
    reply = confined(definition, solution, device)
    if "skipped" in reply:
        return Built(definition.name, solution.name, hardware, "skipped", str(reply["skipped"]))
    if "ok" not in reply:
        detail = str(reply.get("build_error") or reply.get("error") or reply)
        return Built(definition.name, solution.name, hardware, "failed", detail[:300])
    artifact = str(reply.get("metadata", {}).get("artifact", ""))
    return Built(definition.name, solution.name, hardware, "built", artifact)


def _won_trace(
    trace_set: TraceSet, definition: Definition, name: str, tables: tuple[ApplyTable, ...]
) -> Trace | None:
    """A trace of ``name`` at a key it won; its hardware does not matter (a borrowed table's
    traces are of another model), only its shape."""
    keys = {tuple(e.key) for t in tables for e in t.entries if e.winner == name}
    for trace in trace_set.traces.get(definition.name, []):
        if (
            trace.solution == name
            and trace.passed
            and workload_key(definition, trace.workload) in keys
        ):
            return trace
    return None


def _call_once(
    runnable: Runnable, trace: Trace, device: torch.device, blob_root: Path | None
) -> str:
    """One call of a library winner on inputs of a workload it won; what was left out, if
    anything. The inputs come from kernelarena's own code only: a definition's reference is the
    dataset's code, which runs only in a sandbox (``evaluate.judge.references``), so its
    ``make_inputs`` shapes them only where the reference is the library's own."""
    definition = runnable.definition
    axes = definition.resolve_axes(trace.workload.axes)
    make_inputs = None
    library = load_library().definitions.get(definition.name)
    if library is not None and library.reference == definition.reference:
        make_inputs = load_reference(definition).get("make_inputs")
    elif defines_make_inputs(definition.reference):
        return (
            "not warmed: its definition's make_inputs is not the library's, and runs only confined"
        )
    inputs = generate_inputs(
        definition,
        trace.workload,
        axes,
        device,
        seed_for(trace.workload, "warm"),
        make_inputs,
        blob_root,
    )
    arguments: list[Any] = [inputs[n] for n in definition.inputs]
    if runnable.destination_passing_style:
        arguments += list(allocate_outputs(definition, axes, device).values())
    runnable(*arguments)
    torch.cuda.synchronize(device)
    return ""
