"""The judge: evaluate one solution on one workload without ever running its code here, nor the
code of its definition's reference.

The solution runs in a sandbox process (``sandbox``), the definition's reference in another
(``references``, ``reference_sandbox``); this process draws the inputs, shares them (``arena``),
keeps the pristine copies and the expected outputs where the solution's sandbox cannot reach them,
compares, and writes the trace. A reference that fails is the dataset's fault: the job is skipped
with its reason, never judged. Correct before fast: ``trials`` draws of fresh
inputs, outputs poisoned before every call, every output against the reference within tolerance,
inputs not aliased by an output unchanged. Then the sandbox times the solution, and the judge checks
the claim (``timing_check``): it times eager loops over the timed input sets with its own clock,
refills sets drawn at random in place with new values, checks every output again (a solution that caches results
by address, or leaves work running after it returns, fails here), and compares the reported time
with its own figures and with physics (``crosscheck``).
"""

from __future__ import annotations

import contextlib
import gc
from collections.abc import Callable
from dataclasses import replace
from typing import Any

import torch

from kernelarena.data import (
    Correctness,
    Environment,
    Language,
    Performance,
    Status,
)
from kernelarena.evaluate.judge.crosscheck import TimingRejected
from kernelarena.evaluate.judge.device_lock import NO_LOCK, Lock
from kernelarena.evaluate.judge.outcomes import (
    JUDGE_OUT_OF_MEMORY,
    SOLUTION_OUT_OF_MEMORY,
    Outcome,
    not_passed,
    noted_after_capture,
    noted_after_memory,
    short_of_memory,
)
from kernelarena.evaluate.judge.reference_cache import References
from kernelarena.evaluate.judge.references import Reference, ReferenceFailed
from kernelarena.evaluate.judge.shared_sets import CheckedJob, SetMaker, SharedSet
from kernelarena.evaluate.judge.verdicts import CheckFailed, SolutionFailed, merge, with_details
from kernelarena.evaluate.judge.warm_up import JudgeWarmUp
from kernelarena.evaluate.options import Job
from kernelarena.evaluate.sandbox.arena import Arena, give_back_cached
from kernelarena.evaluate.sandbox.sandboxes import Sandbox, SandboxDied, Sandboxes
from kernelarena.evaluate.sandbox.solution_caches import namespace_of
from kernelarena.evaluate.sandbox.timing import device_healthy
from kernelarena.runtime.inputs import (
    STANDARD,
    Distribution,
    InputsError,
    seed_for,
)

_REUSED = (
    "the solution reuses results across calls: the same inputs at other addresses pass, so it "
    "returned results cached by input address. "
)


# The correctness trials draw their floating-point inputs from these in turn (``inputs.
# Distribution``): the standard normal, a narrow one, and a narrow one off zero. A kernel right
# only near the standard normal (a copy for a LayerNorm of rows already normalised) fails the
# others. Kept narrow: wider inputs overflow float16 products of sums (a gated MLP).
TRIAL_DISTRIBUTIONS: list[Distribution] = [STANDARD, (0.125, 0.0), (0.125, 0.125)]


def _drawn(distribution: Distribution) -> str:
    if distribution == STANDARD:
        return ""
    scale, shift = distribution
    return f" (inputs drawn as {scale:g} * N(0, 1) + {shift:g})"


class Evaluator:
    """Holds what a judge keeps between jobs: references, reference timings, its sandboxes."""

    gpu: Lock = NO_LOCK  # the GPU's lock, where several judges share it (``device_lock``)

    def __init__(
        self,
        device: torch.device,
        environment: dict[str, Any],
        sandboxes: Sandboxes,
        gpu: Lock = NO_LOCK,
    ) -> None:
        """``gpu``: the lock this judge shares with the GPU's other judges (``device_lock``)."""
        self.device = device
        self.gpu = gpu
        self.environment = Environment.model_validate(environment)
        self.sandboxes = sandboxes
        self.arena = Arena(device)
        self.references = References(device, sandboxes)
        self.reference_timings: dict[tuple[str, str, bool], Any] = {}
        self._warm_up: JudgeWarmUp | None = None
        self._capture_failed = False  # in the job just evaluated (``SetMaker.capture_failed``)
        # Workloads whose sets and reference did not fit with everything else given back: their
        # later jobs are skipped at the first shortage, not run twice.
        self._too_large: set[tuple[str, str]] = set()

    def warm_up_in_background(self, gpu: Lock = NO_LOCK) -> None:
        """The judge's kernels and first calls, while it waits for its first job and that job's
        sandbox and checks (``warm_up``); ``gpu``: the warm-up thread's own hold on the lock."""
        self._warm_up = JudgeWarmUp(self.device, gpu=gpu)

    def _settle(self) -> None:
        """Nothing of the judge's may run beside its timing (its clocks, the reference's timing,
        the sandbox's timed calls)."""
        if self._warm_up is not None:
            self._warm_up.join()
            self._warm_up = None

    def close(self) -> None:
        self._settle()  # its CUDA work must not meet the teardown
        self.references.close()
        self.sandboxes.close()
        self.arena.close()

    # -- entry ----------------------------------------------------------------------------------

    def evaluate(self, job: Job, notify: Callable[[str], None] = lambda stage: None) -> Outcome:
        solution = job.solution
        on_gpu = self.device.type == "cuda"
        if not solution.runs_on("cuda" if on_gpu else "cpu") and solution.spec.language not in (
            Language.CUDA,
            Language.CPP,
        ):
            return Outcome(
                skipped=f"targets {solution.spec.target_hardware}; this device is {self.device.type}"
            )
        outcome = self._in_sandbox(job, notify)
        if short_of_memory(outcome):
            workload = (job.definition.content_hash(), job.workload.content_hash())
            if not (outcome.skipped and workload in self._too_large):
                first, outcome = outcome, self._again_with_memory_given_back(job, notify)
                outcome = noted_after_memory(outcome, first)
                if outcome.skipped is not None and short_of_memory(outcome):
                    self._too_large.add(workload)
        if self._capture_failed and job.options.allow_graph and not_passed(outcome):
            # A capture the solution could not take part in (a host synchronization inside it)
            # can leave its process unusable, and a graph can miss work its calls do (a launch on
            # the legacy default stream): a job that failed in either is timed again with events,
            # in a fresh sandbox, as a call that cannot be captured must be. apply never runs it
            # inside a capture (``Performance.capturable``).
            self.sandboxes.retire()
            without = replace(job, options=replace(job.options, allow_graph=False))
            outcome = noted_after_capture(self._in_sandbox(without, notify), outcome)
        return outcome

    def _again_with_memory_given_back(self, job: Job, notify: Callable[[str], None]) -> Outcome:
        """The job once more after a shortage of device memory, with everything this judge holds
        on the device given back: the references it keeps (their processes, caches and kept
        draws), the solution's process (its allocator's cache, its graphs' pools) and its own
        cache. A device is shared by these processes, and what one keeps cached the others
        cannot use (on an H200, a 1e6 x 1000 set's reference ran out with 137 of 140 GiB taken).
        Short again, the second outcome stands."""
        self.references.close()
        self.sandboxes.retire()
        gc.collect()
        if self.device.type == "cuda":
            torch.cuda.empty_cache()
        return self._in_sandbox(job, notify)

    def _in_sandbox(self, job: Job, notify: Callable[[str], None]) -> Outcome:
        """One evaluation in the sandbox serving the solution: what it printed goes to the trace,
        and processes it left running fail it."""
        self._capture_failed = False
        try:
            sandbox = self.sandboxes.for_solution(job.solution.content_hash())
        except SandboxDied as died:
            return self._failed(job, Status.RUNTIME_ERROR, str(died))
        offset = sandbox.log_size()
        try:
            outcome = self._evaluate_in(sandbox, job, notify)
        except SandboxDied as died:
            self.sandboxes.retire()
            outcome = self._failed(job, Status.RUNTIME_ERROR, str(died))
        strays = sandbox.strays() if sandbox.alive() else []
        if strays:
            self.sandboxes.retire()
            outcome = self._failed(
                job,
                Status.RUNTIME_ERROR,
                f"the solution left {len(strays)} process(es) running after its job "
                f"(pids {', '.join(map(str, strays[:8]))}); they were killed",
            )
        printed = sandbox.log_since(offset)
        trace = outcome.trace
        if printed.strip() and trace is not None and trace.evaluation is not None:
            trace.evaluation.log = (trace.evaluation.log + "\n--- output ---\n" + printed)[-8000:]
        return outcome

    def _evaluate_in(self, sandbox: Sandbox, job: Job, notify: Callable[[str], None]) -> Outcome:
        build = self._build(sandbox, job)
        if "skipped" in build:
            return Outcome(skipped=str(build["skipped"]))
        if "ok" not in build:
            log = str(build.get("build_error") or build.get("error") or build)
            return self._failed(job, Status.COMPILE_ERROR, log)
        if (
            self.device.type != "cuda"
            and job.solution.spec.language in (Language.CUDA, Language.CPP)
            and job.solution.runs_on("cuda")
        ):
            arch = build.get("metadata", {}).get("arch", "the GPU")
            return Outcome(skipped=f"compiled for {arch}; not run: no GPU here")
        notify("running")
        try:
            reference = self._reference(job)
        except ReferenceFailed as failed:  # the dataset's fault: nothing to judge
            return Outcome(skipped=str(failed))
        checked = CheckedJob(
            job.definition,
            job.workload,
            job.definition.resolve_axes(job.workload.axes),
            reference,
            job.options,
            job.blob_root,
            bool(build.get("dps")),
        )
        outcome = self._judged(SetMaker(self.arena, sandbox, checked, self.device), job)
        try:
            # Stopped until its definition's next job: nothing of it runs beside another
            # definition's. A process it left running makes this job's verdict the dataset's.
            reference.release()
        except ReferenceFailed as failed:
            return Outcome(skipped=str(failed))
        return outcome

    def _judged(self, sets: SetMaker, job: Job) -> Outcome:
        """Correct before fast: the checks, then the timing and its checks (``timing_check``).
        ``sets`` make the inputs of ``job``, the job whose trace this is."""
        try:
            with self.gpu.shared():  # the GPU's other judges check beside this one, never time
                correctness = self._check(sets)
                performance = Performance(timing_mode="not_timed")
                log = ""
                if job.options.timing:
                    from kernelarena.evaluate.judge.timing_check import time_and_verify

                    self._settle()
                    # A spare still starting is stopped while the judge times, not waited for.
                    with self.sandboxes.spares_stopped():
                        performance, log = time_and_verify(sets, self)
            passed = job.make_trace(self.environment, Status.PASSED, log, correctness, performance)
            return Outcome(passed)
        except ReferenceFailed as failed:  # the dataset's fault, found first: not a verdict
            return Outcome(skipped=str(failed))
        except InputsError as error:  # the definition's, not the solution's: nothing to judge
            return Outcome(skipped=f"inputs cannot be generated: {error}")
        except torch.OutOfMemoryError as error:  # the judge's own sets: not the solution's fault
            return Outcome(skipped=f"{JUDGE_OUT_OF_MEMORY}: {str(error).splitlines()[0][:200]}")
        except SolutionFailed as failure:
            return self._solution_failed(failure, job)
        except TimingRejected as rejected:
            return self._failed(job, Status.RUNTIME_ERROR, str(rejected))
        except CheckFailed as failure:
            trace = job.make_trace(
                self.environment, failure.status, failure.log, failure.correctness
            )
            return Outcome(trace)
        finally:
            self._capture_failed = sets.capture_failed
            sets.forget_all()
            give_back_cached(self.device)

    def _solution_failed(self, failure: SolutionFailed, job: Job) -> Outcome:
        if failure.kind == "unsupported":
            # A solution (typically a peer library) that declines this case: not a failure.
            last = failure.log.strip().splitlines()[-1:] or [""]
            return Outcome(skipped=f"not supported for this workload: {last[0]}")
        status = Status.COMPILE_ERROR if failure.kind == "compile" else Status.RUNTIME_ERROR
        log = (SOLUTION_OUT_OF_MEMORY if failure.kind == "oom" else "") + failure.log
        fatal = False
        if not failure.healthy:
            log += "\nThe solution's CUDA context is no longer usable; its process is replaced."
            self.sandboxes.retire()
            fatal = self.device.type == "cuda" and not device_healthy(self.device)
        return Outcome(job.make_trace(self.environment, status, log), fatal=fatal)

    # -- caches ---------------------------------------------------------------------------------

    def _build(self, sandbox: Sandbox, job: Job) -> dict[str, Any]:
        """The job's solution built for its definition in ``sandbox`` (the solution's own), once
        per definition."""
        definition, solution = job.definition, job.solution
        key = definition.content_hash()
        if key not in sandbox.builds:
            sandbox.builds[key] = sandbox.request(
                "build", definition.to_json_dict(), solution.to_json_dict(), namespace_of(solution)
            )
        return sandbox.builds[key]

    def _reference(self, job: Job) -> Reference:
        return self.references.get(job.definition, job.options.reference_timeout_s)

    # -- check ----------------------------------------------------------------------------------

    def _check(self, sets: SetMaker) -> Correctness:
        checked = sets.job
        worst = Correctness(max_absolute_error=0.0, max_relative_error=0.0)
        for trial in range(checked.options.trials):
            mark = self.arena.mark()
            distribution = TRIAL_DISTRIBUTIONS[trial % len(TRIAL_DISTRIBUTIONS)]
            seed = seed_for(checked.workload, f"trial{trial}")
            prepared = sets.make(seed, keep_private=True, distribution=distribution)
            expected = sets.expected(prepared)
            # The job's first call may tune itself by timing (an autotuner): alone on the GPU.
            with self.gpu.exclusive() if trial == 0 else contextlib.nullcontext():
                produced = sets.call(prepared)
            comparisons = sets.compare_all(produced, expected, prepared)
            worst = merge(worst, comparisons)
            failed = [c for c in comparisons if not c.ok]
            which = f"trial {trial + 1} of {checked.options.trials}{_drawn(distribution)}"
            if failed:
                log = f"{which}: " + "; ".join(c.describe() for c in failed)
                if self._passes_elsewhere(sets, prepared):
                    log = _REUSED + log
                raise CheckFailed(Status.INCORRECT_NUMERICAL, log, with_details(worst, comparisons))
            changed = sets.changed_input(prepared)
            if changed:
                raise CheckFailed(Status.INCORRECT_NUMERICAL, f"{which}: {changed}", worst)
            found = sets.error_ratios(prepared, produced, expected)
            if found:
                worst.error_ratio = max([worst.error_ratio or 0.0, *(r.ratio for r in found)])
            beyond = [r for r in found if not r.ok]
            if beyond:
                log = f"{which}: " + "; ".join(r.describe() for r in beyond)
                raise CheckFailed(Status.INCORRECT_NUMERICAL, log, worst)
            # Its room goes to the next trial: a solution that caches by address fails there, and
            # the same inputs at other addresses (``_passes_elsewhere``) say so.
            sets.forget([prepared])
            self.arena.rewind(mark)
        return worst

    def _passes_elsewhere(self, sets: SetMaker, failed: SharedSet) -> bool:
        """The same inputs at new addresses: if the solution gets them right there, its failure
        depends on where the inputs live, i.e. it returned results cached by address."""
        again = sets.make(failed.seed, keep_private=True, distribution=failed.distribution)
        expected = sets.expected(again)
        return all(c.ok for c in sets.compare_all(sets.call(again), expected, again))

    # -- traces ---------------------------------------------------------------------------------

    def _failed(self, job: Job, status: Status, log: str) -> Outcome:
        return Outcome(job.make_trace(self.environment, status, log))
