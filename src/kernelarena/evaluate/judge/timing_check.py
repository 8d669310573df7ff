"""Time a solution in its sandbox, then check the claim from the judge's side.

The sandbox times the call the way ``docs/evaluation.md`` describes (a probe decides between CUDA
graph replays over input sets rotated through twice the L2, and CUDA events with the L2 flushed),
and sends its samples. The judge times eager loops over the timed sets with its own clock around the
sandbox's device synchronization (for graph timing, replays of the sandbox's own graph too;
``judge_clock``), checks that a few timed sets' inputs still hold what it drew (no output aliases
them), then refills the sets it draws at random in place with new values, poisons the other sets'
outputs (and half of the refilled ones'), and calls each set once. Every poisoned output must be
complete the moment the pass returns (work left on another stream shows as poison) and the refilled
sets must match the reference (results cached by address, or kept where an output already held a
value, fail). For graph timing the same check follows one replay of the timed graph. ``crosscheck``
then decides whether the reported samples can be true, with a second look before a rejection. The
reference is timed where it runs (its own sandbox: ``references``), the solution's stopped.
"""

from __future__ import annotations

import random
from dataclasses import asdict
from typing import TYPE_CHECKING, Any

import torch

from kernelarena.data import Correctness, Performance, ScalarInput, Status
from kernelarena.evaluate.judge.crosscheck import (
    JudgeClock,
    host_bound_note,
    physics_floor_ms,
    reported_timing,
)
from kernelarena.evaluate.judge.judge_clock import (
    agreed_clock,
    eager_inflated,
    eager_second_look,
    host_submit_ms,
    judge_clock,
)
from kernelarena.evaluate.judge.pass_check import after_pass, before_pass, check_reply
from kernelarena.evaluate.judge.set_checks import in_place
from kernelarena.evaluate.judge.shared_sets import CheckedJob, SetMaker, SharedSet
from kernelarena.evaluate.judge.stage_clock import phase, staged
from kernelarena.evaluate.judge.verdicts import (
    LEFT_RUNNING,
    CheckFailed,
    expect_stream_order,
    expect_success,
    with_details,
)
from kernelarena.evaluate.sandbox.graph_timing import graph_calls, sets_filling_l2
from kernelarena.evaluate.sandbox.sandboxes import with_sandbox_paused
from kernelarena.evaluate.sandbox.timing import Timing
from kernelarena.runtime.inputs import seed_for

if TYPE_CHECKING:
    from kernelarena.evaluate.judge.device_lock import Lock
    from kernelarena.evaluate.judge.evaluator import Evaluator

# Sets whose outputs are compared in full after the eager pass; the others are checked for poison.
SAMPLED_SETS = 4
# The same after the one replay of the timed graph (each compared set costs a reference run).
GRAPH_SAMPLED_SETS = 2
# Timed sets whose inputs are checked, after every timed call, against a fresh draw of their seed.
WATCHED_SETS = 2


@phase("timing", then="finish")
def time_and_verify(sets: SetMaker, evaluator: Evaluator) -> tuple[Performance, str]:
    """The sandbox's timed calls, the judge's clocks and the reference's timing, each alone on the
    GPU (``evaluator.gpu``: where several judges share it, the checks between them overlap)."""
    job, gpu = sets.job, evaluator.gpu
    on_gpu = sets.device.type == "cuda"
    timed, reply, reported, capture_failed = _timed_in_sandbox(sets, gpu)
    graph_timed = reported.mode == "cuda_graph"
    rotated = timed if graph_timed else timed[:2]
    # Until the checks of the graph's replays pass, a failure may be the graph's alone: a kernel
    # launched outside the current stream (the legacy default stream) is right in every eager call
    # and absent from the graph. Such a job is timed again with events (``Evaluator``).
    sets.capture_failed = capture_failed or graph_timed
    after_pass(sets, rotated, reply, "the timed calls")
    with gpu.exclusive():
        clock = judge_clock(sets, rotated, reported)
    inputs_kept(sets, rotated)
    verify_after_timing(sets, rotated)
    if graph_timed:
        verify_graph(sets, rotated)
    sets.capture_failed = capture_failed
    bytes_moved, flops = _costs(job)
    floor = physics_floor_ms(bytes_moved, flops, evaluator.environment.ceilings or {})
    with gpu.exclusive():
        clock, second_look, reported = agreed_clock(
            sets, rotated, reported, clock, floor, evaluator.sandboxes.spares_stopped
        )
        submit_ms = host_submit_ms(sets, rotated, clock.eager_call_ms)
        # The figure apply ranks by; CPU figures check, they rank nothing.
        if on_gpu and eager_inflated(clock, submit_ms, reported):
            clock = eager_second_look(sets, rotated, clock)
            submit_ms = None if submit_ms is None else min(submit_ms, clock.eager_call_ms)
    sets.forget(timed)
    with gpu.exclusive():
        performance = evaluator_performance(
            sets, evaluator, reported, clock, len(timed), (bytes_moved, flops)
        )
    performance.host_submit_ms = submit_ms
    if on_gpu:  # what apply may run inside a capture: a graph that was timed and checked, not
        # one that failed (a host synchronization); a call captured but timed with events (never
        # replayed and checked) stays unknown
        performance.capturable = True if graph_timed else (False if capture_failed else None)
    return performance, _notes(performance, reply, second_look, host_bound_note(reported, clock))


def _timed_in_sandbox(
    sets: SetMaker, gpu: Lock
) -> tuple[list[SharedSet], dict[str, Any], Timing, bool]:
    """The timed sets, the sandbox's reply to its timed calls, the timing it reports, and whether
    a capture failed on the way; the probe and the timed calls alone on the GPU."""
    job = sets.job
    timed = sets.make_many([seed_for(job.workload, f"timing{i}") for i in range(2)])
    options = asdict(job.options)
    on_gpu = sets.device.type == "cuda"
    with gpu.exclusive():
        graph, probe_failed = _probe(sets, timed, options) if on_gpu else (False, False)
    if graph:
        count = sets_filling_l2(timed[0].bytes, sets.device)
        timed += sets.make_many([seed_for(job.workload, f"timing{i}") for i in range(2, count)])
    used = timed if graph else timed[:2]
    before_pass(sets, used)
    sets.capture_failed = probe_failed or graph
    with gpu.exclusive():
        reply = sets.sandbox.request("time", [s.id for s in used], options, graph)
    capture_failed = probe_failed or reply.get("capture_failed") is True
    sets.capture_failed = capture_failed
    expect_success(reply)
    return timed, reply, reported_timing(reply), capture_failed


def _notes(performance: Performance, reply: dict[str, Any], *lines: str) -> str:
    """The trace's log: ``lines``, and compilations during the timed calls (recorded in
    ``performance``)."""
    notes = list(lines)
    compiles = reply.get("compiles")
    if isinstance(compiles, int) and compiles > 0:
        performance.compiles_while_timed = compiles
        notes.append(
            f"torch.compile compiled {compiles} frame(s) during the timed calls: this figure "
            "includes compilation (dispatch ignores it)"
        )
    return "\n".join(n for n in notes if n)


def _probe(sets: SetMaker, timed: list[SharedSet], options: dict[str, Any]) -> tuple[bool, bool]:
    """Whether the sandbox will time a CUDA graph, and whether a capture failed on the way."""
    # Until the probe answers: a process can die inside a capture (a host synchronization whose
    # error the solution turns into an exit), and then no answer says so.
    sets.capture_failed = options["allow_graph"]
    reply = sets.sandbox.request("probe", [s.id for s in timed], options)
    expect_success(reply)
    probe_failed = reply.get("capture_failed") is True
    sets.capture_failed = probe_failed
    return reply.get("graph") is True, probe_failed


def _costs(job: CheckedJob) -> tuple[float | None, float | None]:
    """The workload's bytes moved and FLOPs, from its definition's cost expressions."""
    scalars = {n: v.value for n, v in job.workload.inputs.items() if isinstance(v, ScalarInput)}
    return (
        job.definition.cost("bytes_moved", job.axes, scalars),
        job.definition.cost("flops", job.axes, scalars),
    )


@staged("timing_checks")
def inputs_kept(sets: SetMaker, timed: list[SharedSet]) -> None:
    """The inputs no output aliases must hold what the judge drew after all the timed calls, the
    sandbox's and the judge's clocks' (a solution that rewrites its inputs once it has computed,
    zeros or a sorted copy, makes later calls cheap for a data-dependent kernel, and every output
    stays right for the input it saw). Checked on ``WATCHED_SETS`` sets drawn at random, against a
    new draw of their seeds: nothing is kept while the calls run."""
    for shared in random.sample(timed, min(WATCHED_SETS, len(timed))):
        changed = sets.changed_input(shared, sets.pristine(shared))
        if changed:
            raise CheckFailed(
                Status.INCORRECT_NUMERICAL,
                f"during the timed calls: {changed}; the inputs no output aliases must stay as "
                "they were given",
                Correctness(),
            )


@staged("timing_checks")
def verify_after_timing(sets: SetMaker, timed: list[SharedSet]) -> None:
    """Refill the sampled sets' inputs in place (as ``_verify_pass`` says), call each set once,
    then check: every poisoned output complete the moment the calls returned, the sampled sets
    equal to the reference. (The others keep their inputs: they are checked for completeness
    only, so new values there would cost draws and prove nothing more.)"""
    request = ("eager", [s.id for s in timed], len(timed), True)
    _verify_pass(sets, timed, request, compare=True, graph=False)
    # Once more with a few elements changed in every set: one such set in a pass can miss a
    # sampled cache by chance (the changed elements among those it keys on), all of them seldom.
    _verify_pass(sets, timed, request, compare=True, graph=False, partial_only=True)


@staged("timing_checks")
def verify_graph(sets: SetMaker, timed: list[SharedSet]) -> None:
    """The graph the reported time was measured on must do the work: the same refills, one
    replay of that graph, the device synchronized, then the same checks. A solution that does
    nothing while it is being captured (``torch.cuda.is_current_stream_capturing``) times an
    empty graph, which the judge's replay clock confirms; this catches it. In-place outputs
    called more than once per replay change on each call: those sets are checked for
    completeness, not against the reference. The refill draws values the eager pass did not use,
    so nothing cached during that pass can match."""
    calls = graph_calls(len(timed))
    compare = not in_place(sets.job.definition) or calls == len(timed)
    _verify_pass(sets, timed, ("replay", 1), compare=compare, graph=True)


def _verify_pass(
    sets: SetMaker,
    timed: list[SharedSet],
    request: tuple[Any, ...],
    compare: bool,
    graph: bool,
    partial_only: bool = False,
) -> None:
    """Refill the sampled sets (``compare``) and poison the others' outputs, send ``request``,
    and check the outputs the moment it returns. Sampled sets take turns between two refills: a
    few elements of each input changed, outputs poisoned (a solution that caches results keyed
    on a sample of its inputs, or on their address, answers stale), and every input new with the
    outputs keeping what the last call wrote, a right answer for the old inputs, instead of
    poison (a solution that works only where its outputs hold NaN, a check on the device that
    costs no sync, leaves that stale answer). Unfinished sets are checked first, so work left
    running reads as such."""
    indices = list(range(len(timed)))
    count = min(GRAPH_SAMPLED_SETS if graph else SAMPLED_SETS, len(indices)) if compare else 0
    sampled = random.sample(indices, count)
    stale = set() if partial_only else set(sampled[1::2])
    label = f"{'graph_' if graph else ''}{'some' if partial_only else 'refresh'}"
    seeds = [seed_for(sets.job.workload, f"{label}{index}") for index in indices]
    sets.draw_ahead([seeds[index] for index in sampled])
    for index, seed in zip(indices, seeds, strict=True):
        if index in stale:
            sets.refill(timed[index], seed, True, poison=False)
        elif index in sampled:
            sets.refill_some(timed[index], seed)
        else:
            sets.poison(timed[index])
    if sets.device.type == "cuda":
        torch.cuda.synchronize(sets.device)
    # The sampled sets' reference outputs while the sandbox calls: the reference runs on the
    # judge's own copies of their inputs, which nothing of the sandbox's reaches.
    reply, _ = sets.sandbox.request_beside(
        request, lambda: sets.expect([timed[index] for index in sorted(sampled)])
    )
    check_reply(sets, reply, "the calls after the refills")
    expect_stream_order(reply, "the calls after the refills")
    unfinished = _still_poisoned(sets, timed)
    order = sorted(unfinished) + sorted(set(sampled) - unfinished)
    sets.expect([timed[index] for index in order])  # the unfinished unsampled ones, if any
    for index in order:
        _check_set(sets, timed[index], late=index in unfinished, graph=graph)


def _still_poisoned(sets: SetMaker, timed: list[SharedSet]) -> set[int]:
    """Sets with a NaN in a floating-point output right after the pass returned: unwritten, or
    written by work still running (NaN the reference also produces is sorted out by the check)."""
    flags = []
    for index, shared in enumerate(timed):
        for tensor in shared.outputs.values():
            if tensor.is_floating_point() and tensor.numel():
                flags.append((index, torch.isnan(tensor).any()))
    if not flags:
        return set()
    values = torch.stack([f for _, f in flags]).tolist()
    return {index for (index, _), flagged in zip(flags, values, strict=True) if flagged}


def _check_set(sets: SetMaker, shared: SharedSet, late: bool, graph: bool) -> None:
    # Right by the cheap float32 check (``SetMaker.all_right``), else compared in full.
    comparisons = (
        []
        if sets.all_right([shared])
        else sets.compare_all(sets.produced(shared), sets.expected(shared), shared)
    )
    failed = [c for c in comparisons if not c.ok]
    if graph and failed:
        what = "left outputs unwritten" if late else "gave outputs that do not match the reference"
        raise CheckFailed(
            Status.RUNTIME_ERROR,
            f"timing rejected: one replay of the CUDA graph the time was measured on {what}, with "
            "the inputs refilled in place: the graph does not do the work its calls do (work "
            "skipped or cached while capturing). " + "; ".join(c.describe() for c in failed),
        )
    if not failed:
        if late and not graph:  # NaN at first look, right now: the work finished after the return
            raise CheckFailed(Status.RUNTIME_ERROR, LEFT_RUNNING)
        return
    log = (
        "after the timed runs the inputs were refilled in place with new values and the outputs "
        "no longer match the reference: the solution reuses results across calls (cached by "
        "input address or content, or kept where its outputs already held values). "
        + "; ".join(c.describe() for c in failed)
    )
    raise CheckFailed(Status.INCORRECT_NUMERICAL, log, with_details(Correctness(), comparisons))


def evaluator_performance(
    sets: SetMaker,
    evaluator: Evaluator,
    reported: Timing,
    clock: JudgeClock,
    rotated: int,
    costs: tuple[float | None, float | None],
) -> Performance:
    """The trace's figures; ``costs``: the workload's bytes moved and FLOPs (``_costs``)."""
    job = sets.job
    graph = reported.mode == "cuda_graph"
    key = (job.definition.content_hash(), job.workload.content_hash(), graph)
    reference = evaluator.reference_timings.get(key)
    if reference is None:
        reference = with_sandbox_paused(sets.sandbox, lambda: time_reference(sets, graph, rotated))
        evaluator.reference_timings[key] = reference
    seconds = reported.median_ms * 1e-3
    bytes_moved, flops = costs
    ceilings = evaluator.environment.ceilings or {}
    gbps = bytes_moved / seconds / 1e9 if bytes_moved and seconds > 0 else None
    tflops = flops / seconds / 1e12 if flops and seconds > 0 else None
    fractions = []
    if gbps is not None and ceilings.get("copy_gbps"):
        fractions.append(gbps / ceilings["copy_gbps"])
    if tflops is not None and ceilings.get("matmul_tflops"):
        fractions.append(tflops / ceilings["matmul_tflops"])
    return Performance(
        latency_ms=reported.median_ms,
        reference_latency_ms=reference.median_ms,
        speedup_factor=reference.median_ms / reported.median_ms,
        latency_p20_ms=reported.p20_ms,
        latency_p80_ms=reported.p80_ms,
        sample_count=reported.count,
        samples_ms=[round(s, 6) for s in reported.samples_ms] if job.options.keep_samples else None,
        timing_mode=reported.mode,
        bytes_moved=bytes_moved,
        flops=flops,
        achieved_gbps=gbps,
        achieved_tflops=tflops,
        ceiling_fraction=max(fractions) if fractions else None,
        eager_call_ms=round(clock.eager_call_ms, 6),
    )


@staged("reference_timing")
def time_reference(sets: SetMaker, graph: bool, count: int) -> Timing:
    """The reference timed the way its solution was (graph over ``count`` rotated sets, or
    events over two), where it runs (``references``)."""
    job = sets.job
    draws = [sets.draw(seed_for(job.workload, f"timing{i}")) for i in range(count if graph else 2)]
    return job.reference.time(job, sets.device, draws, graph)
