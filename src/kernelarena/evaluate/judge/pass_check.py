"""Every timed call is a checked call: the judge poisons the outputs of the timed sets before each
pass of calls (the sandbox's own timing, every batch of the judge's clocks, the graph's replays)
and compares them with the reference after it.

A solution cannot tell a timed call from a checked one by how it is called (the sandbox calls it
one way for every request), and it gains nothing by telling them apart some other way (its
caller's frames, a count of its calls): whatever pass it skips work in, or stops being right in,
leaves outputs that fail here. Definitions whose outputs alias inputs are the exception: each call
changes the inputs of the next, so their passes are checked by ``timing_check``'s single calls
after in-place refills instead.
"""

from __future__ import annotations

import random
from typing import Any

import torch

from kernelarena.data import Correctness, Status
from kernelarena.evaluate.judge.set_checks import in_place
from kernelarena.evaluate.judge.shared_sets import SetMaker, SharedSet
from kernelarena.evaluate.judge.stage_clock import staged
from kernelarena.evaluate.judge.verdicts import (
    CheckFailed,
    check_returned,
    expect_success,
    with_details,
)

# Sets compared after a pass: all of them up to this many or where they are compared as one
# (``SetMaker.check_together``), else this many drawn at random (a solution that skips work on
# some sets only is caught on one of the many passes).
CHECKED_SETS = 8


def check_reply(sets: SetMaker, reply: dict[str, Any], what: str) -> None:
    """A pass's reply: no error, and a value-returning solution's results, as the sandbox
    describes them, plain tensors of the declared dtype and shape."""
    expect_success(reply)
    if sets.job.destination_passing_style:
        return
    returned = reply.get("returned")
    if not isinstance(returned, list):
        raise CheckFailed(
            Status.RUNTIME_ERROR, f"the solution's process described no results of {what}"
        )
    for item in returned:
        if item is not None:
            check_returned(sets.job, item)


def checkable(sets: SetMaker) -> bool:
    """Whether each pass's outputs can be compared with the reference (no output is in place)."""
    return not in_place(sets.job.definition)


@staged("poison")
def before_pass(sets: SetMaker, timed: list[SharedSet]) -> None:
    """Poison the outputs of every timed set, so that a pass that leaves one unwritten fails."""
    if not checkable(sets):
        return
    sets.poison_many(timed)
    if sets.device.type == "cuda":
        torch.cuda.synchronize(sets.device)


@staged("pass_check")
def after_pass(sets: SetMaker, timed: list[SharedSet], reply: dict[str, Any], what: str) -> None:
    """Check a pass's reply and outputs: a value-returning solution's results plain tensors of the
    declared dtype and shape, and every set's outputs (up to ``CHECKED_SETS``) equal to the
    reference's for its inputs. ``what`` names the pass in the log."""
    check_reply(sets, reply, what)
    if not checkable(sets):
        return
    few = len(timed) <= CHECKED_SETS or sets.check_together(timed)
    looked_at = timed if few else random.sample(timed, CHECKED_SETS)
    if sets.all_right(looked_at):  # the usual case, found cheaply; else the full comparison
        return
    for shared in looked_at:
        comparisons = sets.compare_all(sets.produced(shared), sets.expected(shared), shared)
        failed = [c for c in comparisons if not c.ok]
        if failed:
            pristine = sets.given(shared)
            changed = sets.changed_input(shared, pristine)
            if changed:  # the likelier cause, and the one to name
                raise CheckFailed(
                    Status.INCORRECT_NUMERICAL,
                    f"during {what}: {changed}; the inputs no output aliases must stay as they "
                    "were given",
                    Correctness(),
                )
            raise CheckFailed(
                Status.INCORRECT_NUMERICAL,
                f"the outputs of {what} do not match the reference: every timed call is checked, "
                "and a solution that does less work when it is timed, or is right only on its "
                "first calls, fails here. " + "; ".join(c.describe() for c in failed),
                with_details(Correctness(), comparisons),
            )
