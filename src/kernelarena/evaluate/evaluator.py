"""Evaluate one solution on one workload inside a worker: build, check, time.

Correct before fast: a solution is timed only on workloads it passed, on fresh inputs. The checks:
outputs poisoned before every call; ``trials`` draws of fresh random inputs; every output against the
reference within the definition's tolerance; inputs not aliased by an output unchanged afterwards.
The timing rotates two input sets and then refills them in place with new values and checks the
outputs again, so a solution that caches results by input address or content is caught.
"""

from __future__ import annotations

import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from kernelarena.build import BuildError, DependencyMissing, Runnable, build_solution
from kernelarena.data import (
    Correctness,
    Definition,
    Environment,
    Language,
    Performance,
    ScalarInput,
    Solution,
    Status,
    Trace,
    Workload,
)
from kernelarena.evaluate.compare import Comparison, compare, first_changed_input
from kernelarena.evaluate.inputs import (
    Value,
    allocate_outputs,
    generate_inputs,
    load_reference,
    poison,
    seed_for,
)
from kernelarena.evaluate.options import Options, make_trace
from kernelarena.evaluate.timing import (
    Timing,
    probe_cuda_graph,
    time_cpu,
    time_cuda,
    time_cuda_graph,
)

# The reference is timed only for the speedup column: its graph replays stop after this long (at
# least 5 replays of 20+ calls). A float32 reference of a large workload takes 10x the solution's
# time, and all 30 replays of it were a third of a whole run's evaluation time.
REFERENCE_GRAPH_BUDGET_MS = 20.0


@dataclass
class Outcome:
    trace: Trace | None = None
    skipped: str | None = None
    fatal: bool = False


class CheckFailed(Exception):
    def __init__(self, status: Status, log: str, correctness: Correctness | None = None) -> None:
        super().__init__(log)
        self.status = status
        self.log = log
        self.correctness = correctness


@dataclass
class _Prepared:
    inputs: dict[str, Value]
    outputs: dict[str, torch.Tensor]
    axes: dict[str, int]
    arguments: list[Any] = field(default_factory=list)


class Evaluator:
    """Holds what a worker keeps between jobs: built solutions, references, reference timings."""

    def __init__(self, device: torch.device, environment: dict[str, Any]) -> None:
        self.device = device
        self.environment = Environment.model_validate(environment)
        self._runnables: dict[str, Runnable] = {}
        self._references: dict[str, dict[str, Any]] = {}
        self._reference_timings: dict[tuple[str, str, bool], Timing] = {}

    # -- entry ----------------------------------------------------------------------------------

    def evaluate(
        self,
        definition: Definition,
        solution: Solution,
        workload: Workload,
        options: Options,
        blob_root: Path | None = None,
        notify: Callable[[str], None] = lambda stage: None,
    ) -> Outcome:
        on_gpu = self.device.type == "cuda"
        if not solution.runs_on("cuda" if on_gpu else "cpu") and solution.spec.language not in (
            Language.CUDA,
            Language.CPP,
        ):
            return Outcome(
                skipped=f"targets {solution.spec.target_hardware}; this device is {self.device.type}"
            )
        try:
            runnable = self._build(definition, solution)
        except DependencyMissing as error:
            return Outcome(skipped=str(error))
        except BuildError as error:
            return Outcome(
                self._trace(definition, solution, workload, Status.COMPILE_ERROR, str(error))
            )
        if (
            not on_gpu
            and solution.spec.language in (Language.CUDA, Language.CPP)
            and solution.runs_on("cuda")
        ):
            return Outcome(
                skipped=f"compiled for {runnable.metadata.get('arch', 'the GPU')}; not run: no GPU here"
            )
        notify("running")
        try:
            axes = definition.resolve_axes(workload.axes)
            reference = self._reference(definition)
            correctness = self._check(
                definition, runnable, reference, workload, axes, options, blob_root
            )
            # Not timed: PASSED still carries performance (the schema requires it), marked as such.
            performance = Performance(timing_mode="not_timed")
            if options.timing:
                performance = self._time(
                    definition, runnable, reference, workload, axes, options, blob_root
                )
            return Outcome(
                self._trace(
                    definition, solution, workload, Status.PASSED, "", correctness, performance
                )
            )
        except NotImplementedError as error:
            # A solution (typically a peer library) that declines this case: not a failure of ours.
            return Outcome(skipped=f"not supported for this workload: {error}")
        except CheckFailed as failure:
            trace = self._trace(
                definition, solution, workload, failure.status, failure.log, failure.correctness
            )
            return Outcome(trace)
        except Exception as error:
            status, log = _classify(error)
            fatal = on_gpu and not _device_healthy(self.device)
            if fatal:
                log += "\nThe CUDA context is no longer usable; the worker is replaced."
            return Outcome(self._trace(definition, solution, workload, status, log), fatal=fatal)

    # -- caches ---------------------------------------------------------------------------------

    def _build(self, definition: Definition, solution: Solution) -> Runnable:
        key = solution.content_hash() + definition.content_hash()
        if key not in self._runnables:
            self._runnables[key] = build_solution(definition, solution, str(self.device))
        return self._runnables[key]

    def _reference(self, definition: Definition) -> dict[str, Any]:
        key = definition.content_hash()
        if key not in self._references:
            self._references[key] = load_reference(definition)
        return self._references[key]

    # -- inputs and calls -----------------------------------------------------------------------

    def _prepare(
        self,
        definition: Definition,
        workload: Workload,
        axes: dict[str, int],
        reference: dict[str, Any],
        seed: int,
        blob_root: Path | None,
        destination_passing_style: bool,
    ) -> _Prepared:
        inputs = generate_inputs(
            definition, workload, axes, self.device, seed, reference.get("make_inputs"), blob_root
        )
        outputs = allocate_outputs(definition, axes, self.device)
        arguments = [inputs[name] for name in definition.inputs]
        if destination_passing_style:
            arguments += [outputs[name] for name in outputs]
        return _Prepared(inputs, outputs, axes, arguments)

    def _expected(
        self, definition: Definition, reference: dict[str, Any], prepared: _Prepared
    ) -> dict[str, torch.Tensor]:
        inputs = prepared.inputs
        copies = [
            v.clone() if isinstance(v, torch.Tensor) else v
            for v in (inputs[n] for n in definition.inputs)
        ]
        with torch.no_grad():
            result = reference["run"](*copies)
        try:
            return _as_outputs(definition, result, "the reference", prepared.axes)
        except CheckFailed as failure:
            raise RuntimeError(f"the definition's reference is broken: {failure.log}") from None

    def _call(
        self, definition: Definition, runnable: Runnable, prepared: _Prepared
    ) -> dict[str, torch.Tensor]:
        for name, tensor in prepared.outputs.items():
            poison(tensor, definition.outputs[name].dtype)
        result = runnable(*prepared.arguments)
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)
        if runnable.destination_passing_style:
            produced = dict(prepared.outputs)
        else:
            produced = _as_outputs(definition, result, "the solution", prepared.axes)
        for name, spec in definition.outputs.items():
            if spec.aliases is not None:
                value = prepared.inputs[spec.aliases]
                assert isinstance(value, torch.Tensor)
                produced[name] = value
        return produced

    # -- check ----------------------------------------------------------------------------------

    def _check(
        self,
        definition: Definition,
        runnable: Runnable,
        reference: dict[str, Any],
        workload: Workload,
        axes: dict[str, int],
        options: Options,
        blob_root: Path | None,
    ) -> Correctness:
        worst = Correctness(max_absolute_error=0.0, max_relative_error=0.0)
        aliased = {spec.aliases for spec in definition.outputs.values() if spec.aliases}
        for trial in range(options.trials):
            prepared = self._prepare(
                definition,
                workload,
                axes,
                reference,
                seed_for(workload, f"trial{trial}"),
                blob_root,
                runnable.destination_passing_style,
            )
            expected = self._expected(definition, reference, prepared)
            before = {
                n: v.clone()
                for n, v in prepared.inputs.items()
                if isinstance(v, torch.Tensor) and n not in aliased
            }
            produced = self._call(definition, runnable, prepared)
            comparisons = self._compare_all(definition, produced, expected)
            worst = _merge(worst, comparisons)
            failed = [c for c in comparisons if not c.ok]
            if failed:
                log = f"trial {trial + 1} of {options.trials}: " + "; ".join(
                    c.describe() for c in failed
                )
                raise CheckFailed(
                    Status.INCORRECT_NUMERICAL, log, _with_details(worst, comparisons)
                )
            pairs = {}
            for name, snapshot in before.items():
                current = prepared.inputs[name]
                assert isinstance(current, torch.Tensor)
                pairs[name] = (snapshot, current)
            changed = first_changed_input(pairs)
            if changed:
                raise CheckFailed(
                    Status.INCORRECT_NUMERICAL, f"trial {trial + 1}: {changed}", worst
                )
        return worst

    def _compare_all(
        self,
        definition: Definition,
        produced: dict[str, torch.Tensor],
        expected: dict[str, torch.Tensor],
    ) -> list[Comparison]:
        comparisons = []
        for name, spec in definition.outputs.items():
            comparisons.append(
                compare(
                    name, produced[name], expected[name], spec.dtype, definition.tolerance_for(name)
                )
            )
        return comparisons

    # -- time -----------------------------------------------------------------------------------

    def _time(
        self,
        definition: Definition,
        runnable: Runnable,
        reference: dict[str, Any],
        workload: Workload,
        axes: dict[str, int],
        options: Options,
        blob_root: Path | None,
    ) -> Performance:
        """CUDA graph replays for calls short on the GPU (``_short``), over input sets rotated
        through more memory than the L2 holds; events with the L2 flushed for the rest, so both
        modes start from device memory."""

        def prepare(index: int, dps: bool) -> _Prepared:
            seed = seed_for(workload, f"timing{index}")
            return self._prepare(definition, workload, axes, reference, seed, blob_root, dps)

        dps = runnable.destination_passing_style
        sets = [prepare(i, dps) for i in range(2)]
        use_graph = self._short(lambda i: runnable(*sets[i % 2].arguments), options)
        timing = None
        if use_graph:
            sets += [prepare(i, dps) for i in range(2, self._rotation(sets[0]))]
            timing = self._graph(lambda i: runnable(*sets[i % len(sets)].arguments), len(sets))
            use_graph = timing is not None
        if timing is None:
            timing = self._events_or_clock(lambda i: runnable(*sets[i % 2].arguments), options)
        self._check_after_timing(
            definition, runnable, reference, workload, axes, sets[:2], blob_root
        )
        sets.clear()  # free the rotated inputs before the reference allocates its own
        key = (definition.content_hash(), workload.content_hash(), use_graph)
        reference_timing = self._reference_timings.get(key)
        if reference_timing is None:
            run = reference["run"]
            reference_sets = [prepare(i, False) for i in range(2)]
            if use_graph:
                count = self._rotation(reference_sets[0])
                reference_sets += [prepare(i, False) for i in range(2, count)]
                reference_timing = self._graph(
                    lambda i: run(*reference_sets[i % count].arguments),
                    count,
                    budget_ms=REFERENCE_GRAPH_BUDGET_MS,
                )
            if reference_timing is None:  # also when the reference cannot be captured in a graph
                reference_timing = self._events_or_clock(
                    lambda i: run(*reference_sets[i % 2].arguments), options
                )
            self._reference_timings[key] = reference_timing
        return self._performance(definition, workload, axes, timing, reference_timing, options)

    def _short(self, fn: Callable[[int], Any], options: Options) -> bool:
        """The GPU time of a call decides the mode: under ``graph_below_us``, CUDA graphs (launch
        gaps would dominate per-call events), so the longer event run is spent only where it is
        used. A few calls timed with events give the GPU time when the GPU is the slower side;
        when the host takes as long to submit a call as the events measured (an autotuned Triton
        launcher: 70-110 us of Python for a 2-35 us kernel), events measure the host, and a graph
        of two calls replayed gives the GPU time instead. Long GPU-bound calls (a copy of a GiB)
        are never captured by the probe. A call that cannot be captured is timed with events."""
        if self.device.type != "cuda":
            return False
        with torch.no_grad():
            events = time_cuda(
                fn,
                self.device,
                warmup=options.warmup,
                max_iterations=5,
                min_iterations=5,
                budget_ms=0.0,
            )
            if events.median_ms * 1e3 < options.graph_below_us:
                return True
            submitted = time.perf_counter()
            for i in range(3):
                fn(i)
            host_ms = (time.perf_counter() - submitted) * 1e3 / 3
            torch.cuda.synchronize(self.device)
            if host_ms < 0.5 * events.median_ms:
                return False  # the GPU is the slower side: the events measured it
            try:
                probe = probe_cuda_graph(fn, self.device, warmup=options.warmup)
            except Exception:  # not capturable; a call that fails outright fails again in events
                torch.cuda.synchronize(self.device)
                return False
        return probe.median_ms * 1e3 < options.graph_below_us

    def _events_or_clock(self, fn: Callable[[int], Any], options: Options) -> Timing:
        with torch.no_grad():
            if self.device.type != "cuda":
                return time_cpu(
                    fn,
                    warmup=options.warmup,
                    max_iterations=options.max_iterations,
                    min_iterations=min(3, options.min_iterations),
                    budget_ms=options.budget_ms,
                )
            return time_cuda(
                fn,
                self.device,
                warmup=options.warmup,
                max_iterations=options.max_iterations,
                min_iterations=options.min_iterations,
                budget_ms=options.budget_ms,
            )

    def _graph(
        self, fn: Callable[[int], Any], rotation: int, budget_ms: float | None = None
    ) -> Timing | None:
        try:
            with torch.no_grad():
                return time_cuda_graph(
                    fn, self.device, calls_per_graph=max(20, rotation), budget_ms=budget_ms
                )
        except Exception:  # not capturable: host syncs, allocations outside the graph pool
            torch.cuda.synchronize(self.device)
            return None

    def _rotation(self, prepared: _Prepared) -> int:
        """How many input sets fill twice the L2 (at least 2, at most 64)."""
        tensors = [v for v in prepared.inputs.values() if isinstance(v, torch.Tensor)]
        tensors += list(prepared.outputs.values())
        set_bytes = sum(t.numel() * t.element_size() for t in tensors) or 1
        l2_bytes = int(
            getattr(torch.cuda.get_device_properties(self.device), "L2_cache_size", 50 << 20)
        )
        return max(2, min(64, -(-2 * l2_bytes // set_bytes)))

    def _check_after_timing(
        self,
        definition: Definition,
        runnable: Runnable,
        reference: dict[str, Any],
        workload: Workload,
        axes: dict[str, int],
        sets: list[_Prepared],
        blob_root: Path | None,
    ) -> None:
        """Refill each timed input set in place (same addresses, new values) and check again."""
        for index, prepared in enumerate(sets):
            fresh = generate_inputs(
                definition,
                workload,
                axes,
                self.device,
                seed_for(workload, f"refresh{index}"),
                reference.get("make_inputs"),
                blob_root,
            )
            for name, value in fresh.items():
                target = prepared.inputs[name]
                if isinstance(target, torch.Tensor) and isinstance(value, torch.Tensor):
                    target.copy_(value)
            expected = self._expected(definition, reference, prepared)
            produced = self._call(definition, runnable, prepared)
            comparisons = self._compare_all(definition, produced, expected)
            failed = [c for c in comparisons if not c.ok]
            if failed:
                log = (
                    "after the timed runs the inputs were refilled in place with new values and the outputs "
                    "no longer match the reference: the solution reuses results across calls (cached by "
                    "input address or content). " + "; ".join(c.describe() for c in failed)
                )
                raise CheckFailed(
                    Status.INCORRECT_NUMERICAL, log, _with_details(Correctness(), comparisons)
                )

    def _performance(
        self,
        definition: Definition,
        workload: Workload,
        axes: dict[str, int],
        timing: Timing,
        reference: Timing,
        options: Options,
    ) -> Performance:
        seconds = timing.median_ms * 1e-3
        scalars = {n: v.value for n, v in workload.inputs.items() if isinstance(v, ScalarInput)}
        bytes_moved = definition.cost("bytes_moved", axes, scalars)
        flops = definition.cost("flops", axes, scalars)
        ceilings = self.environment.ceilings or {}
        gbps = bytes_moved / seconds / 1e9 if bytes_moved and seconds > 0 else None
        tflops = flops / seconds / 1e12 if flops and seconds > 0 else None
        fractions = []
        if gbps is not None and ceilings.get("copy_gbps"):
            fractions.append(gbps / ceilings["copy_gbps"])
        if tflops is not None and ceilings.get("matmul_tflops"):
            fractions.append(tflops / ceilings["matmul_tflops"])
        return Performance(
            latency_ms=timing.median_ms,
            reference_latency_ms=reference.median_ms,
            speedup_factor=reference.median_ms / timing.median_ms if timing.median_ms > 0 else 0.0,
            latency_p20_ms=timing.p20_ms,
            latency_p80_ms=timing.p80_ms,
            sample_count=timing.count,
            samples_ms=[round(s, 6) for s in timing.samples_ms] if options.keep_samples else None,
            timing_mode=timing.mode,
            bytes_moved=bytes_moved,
            flops=flops,
            achieved_gbps=gbps,
            achieved_tflops=tflops,
            ceiling_fraction=max(fractions) if fractions else None,
        )

    # -- traces ---------------------------------------------------------------------------------

    def _trace(
        self,
        definition: Definition,
        solution: Solution,
        workload: Workload,
        status: Status,
        log: str,
        correctness: Correctness | None = None,
        performance: Performance | None = None,
    ) -> Trace:
        return make_trace(
            definition, solution, workload, self.environment, status, log, correctness, performance
        )


def _as_outputs(
    definition: Definition, result: Any, who: str, axes: dict[str, int]
) -> dict[str, torch.Tensor]:
    """The outputs of a value-returning call, checked for count, type, dtype and shape."""
    names = list(definition.outputs)
    values = list(result) if isinstance(result, tuple | list) else [result]
    if len(values) != len(names):
        raise CheckFailed(
            Status.INCORRECT_SHAPE,
            f"{who} returned {len(values)} outputs; the definition has {len(names)} ({', '.join(names)})",
        )
    produced = {}
    for name, value in zip(names, values, strict=True):
        spec = definition.outputs[name]
        if not isinstance(value, torch.Tensor):
            raise CheckFailed(
                Status.INCORRECT_SHAPE,
                f"{who} returned {type(value).__name__} for output '{name}', not a tensor",
            )
        produced[name] = value
        if value.dtype != spec.dtype.to_torch():
            raise CheckFailed(
                Status.INCORRECT_DTYPE,
                f"{who}: output '{name}' has dtype {value.dtype}, expected {spec.dtype.value}",
            )
        shape = definition.shape_of(spec, axes) or ()
        if tuple(value.shape) != tuple(shape):
            raise CheckFailed(
                Status.INCORRECT_SHAPE,
                f"{who}: output '{name}' has shape {tuple(value.shape)}, expected {tuple(shape)}",
            )
    return produced


def _merge(worst: Correctness, comparisons: list[Comparison]) -> Correctness:
    return Correctness(
        max_absolute_error=max(
            [worst.max_absolute_error, *(c.max_absolute_error for c in comparisons)]
        ),
        max_relative_error=max(
            [worst.max_relative_error, *(c.max_relative_error for c in comparisons)]
        ),
        extra=worst.extra,
    )


def _with_details(worst: Correctness, comparisons: list[Comparison]) -> Correctness:
    merged = _merge(worst, comparisons)
    merged.extra = {
        c.name: {
            "mismatched": c.mismatched,
            "total": c.total,
            "first_mismatches": [
                {
                    "index": list(m["index"]),
                    "got": _finite_or_text(m["got"]),
                    "expected": _finite_or_text(m["expected"]),
                }
                for m in c.first_mismatches
            ],
        }
        for c in comparisons
        if not c.ok
    }
    return merged


def _finite_or_text(value: float) -> float | str:
    return value if value == value and abs(value) != float("inf") else str(value)


def _classify(error: Exception) -> tuple[Status, str]:
    text = "".join(traceback.format_exception(type(error), error, error.__traceback__))
    name = type(error).__name__
    if "CompilationError" in name or "CompileTimeAssertionFailure" in name:
        return Status.COMPILE_ERROR, text
    if isinstance(error, torch.cuda.OutOfMemoryError) or "out of memory" in str(error).lower():
        return Status.RUNTIME_ERROR, "out of memory: " + text
    return Status.RUNTIME_ERROR, text


def _device_healthy(device: torch.device) -> bool:
    try:
        torch.cuda.synchronize(device)
        return float(torch.ones(1, device=device).add_(1).item()) == 2.0
    except Exception:
        return False
