"""Whether a call's outputs were complete on its caller's stream when it returned.

A solution that enqueues its work on a stream of its own and returns without making the caller's
stream wait for it hands back outputs that a caller's next kernel may read before they are written.
The sandbox synchronizes the whole device before the judge looks, so the outputs the judge compares
are complete either way; this is the check that sees the difference. Right after the calls return,
a fingerprint of each output (the sum of its bytes) is taken on the caller's stream, ordered after
whatever that stream was made to wait for; the same fingerprint after the device is synchronized
must equal it. Work still running when the first one was taken changes the second.

Runs in the sandbox, on the judge's check passes only (the judge's clock passes carry no extra work):
a solution that patches this code can only hide a race from the judge, never a cost, since the
judge's own clock still times its calls with the device synchronized.
"""

from __future__ import annotations

from typing import Any


def fingerprints(torch: Any, tensors_per_set: list[list[Any]]) -> list[list[Any]]:
    """For every set, one int64 device scalar per output tensor, computed on the current stream."""
    return [[_fingerprint(torch, tensor) for tensor in tensors] for tensors in tensors_per_set]


def changed_since(
    torch: Any, tensors_per_set: list[list[Any]], taken: list[list[Any]]
) -> list[int]:
    """The indices of the sets whose outputs differ now (the device synchronized) from the
    fingerprints ``taken`` when the calls returned."""
    now = fingerprints(torch, tensors_per_set)
    flat_taken = [mark for marks in taken for mark in marks]
    if not flat_taken:
        return []
    flat_now = [mark for marks in now for mark in marks]
    differs = (torch.stack(flat_taken) != torch.stack(flat_now)).tolist()
    changed: list[int] = []
    position = 0
    for index, marks in enumerate(taken):
        if any(differs[position : position + len(marks)]):
            changed.append(index)
        position += len(marks)
    return changed


def _fingerprint(torch: Any, tensor: Any) -> Any:
    if tensor.numel() == 0:
        return torch.zeros((), dtype=torch.int64, device=tensor.device)
    # Integer sums accumulate in int64 without a widened copy; a write that lands after the
    # first look replaces poison or stale bytes, which changes the sum.
    return tensor.detach().reshape(-1).view(torch.uint8).sum()
