"""What one attempt at a job came to (``Outcome``), and how a second attempt's trace says why it
was made: after a shortage of device memory, or after a CUDA graph the solution could not take
part in (``evaluator.Evaluator.evaluate`` decides when).
"""

from __future__ import annotations

from dataclasses import dataclass

from kernelarena.data import Evaluation, Status, Trace

JUDGE_OUT_OF_MEMORY = (
    "the judge or the reference ran out of device memory for this workload's sets, beside the "
    "solution's process: too large to judge on this device"
)
SOLUTION_OUT_OF_MEMORY = "out of memory: "


@dataclass
class Outcome:
    trace: Trace | None = None
    skipped: str | None = None
    fatal: bool = False

    @property
    def evaluation(self) -> Evaluation | None:
        return self.trace.evaluation if self.trace is not None else None


def not_passed(outcome: Outcome) -> bool:
    evaluation = outcome.evaluation
    return evaluation is not None and evaluation.status is not Status.PASSED


def short_of_memory(outcome: Outcome) -> bool:
    """Skipped because the judge or the reference ran out of device memory, or failed because
    the solution did (``SolutionFailed`` of kind "oom")."""
    if outcome.skipped is not None:
        return outcome.skipped.startswith(JUDGE_OUT_OF_MEMORY)
    evaluation = outcome.evaluation
    return (
        evaluation is not None
        and evaluation.status is Status.RUNTIME_ERROR
        and evaluation.log.startswith(SOLUTION_OUT_OF_MEMORY)
        and not outcome.fatal
    )


def last_log_line(outcome: Outcome) -> str:
    evaluation = outcome.evaluation
    lines = evaluation.log.strip().splitlines() if evaluation is not None else []
    return lines[-1][:300] if lines else "no log"


def noted_after_memory(outcome: Outcome, first: Outcome) -> Outcome:
    """``outcome``, a second attempt, with its trace saying the first ran out of device memory."""
    evaluation = outcome.evaluation
    if evaluation is not None:
        said = first.skipped or last_log_line(first)
        evaluation.log = (
            f"a first attempt ran out of device memory ({said[:300]}); the job ran again "
            "with the judge's references and the solution's process started anew.\n"
            + evaluation.log
        ).strip()
    return outcome


def noted_after_capture(outcome: Outcome, first: Outcome) -> Outcome:
    """``outcome``, timed again with events, with its trace saying the CUDA graph failed and its
    performance marked as not to be captured (apply never runs it inside a graph)."""
    evaluation = outcome.evaluation
    if evaluation is not None:
        evaluation.log = (
            f"the solution's CUDA graph failed (its capture, or replays that do not do the "
            f"work its calls do), and the job with it ({last_log_line(first)}); timed again with "
            "CUDA events in a fresh sandbox: apply will not run it inside a CUDA graph.\n"
            + evaluation.log
        )
        if evaluation.performance is not None:
            evaluation.performance.capturable = False
    return outcome
