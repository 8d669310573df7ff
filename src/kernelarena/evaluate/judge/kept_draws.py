"""Draws of a workload's inputs kept by (workload, seed, distribution), with the reference's
outputs for them, so that the same draw costs its reference's sandbox one request per run.

A draw is a pure function of its workload, seed and distribution, and every job of a workload
draws the same seeds: its trials, its timed sets, a set without a private copy drawn again for
each check of it. Each solution of a definition would otherwise ask the reference's sandbox to
shape and to compute the same draws again. The judge only reads a kept draw's tensors and the
outputs kept with it; outputs are found by the very tensor objects of a kept draw, so a set whose
inputs were changed (a partial refill copies what it changes) is never taken for one.

Past the budget, what goes first is what the run will want last (``KeptDraws._trim``): a job
reads only its own workload's draws, and a run takes a definition's workloads in turn for each
solution, so the workload just finished comes round again last. The least recently used would go
instead, and with a definition's draws over the budget each solution would find none of its own
(on an H200, FlashInfer-Bench's eight rmsnorm workloads: the third solution drew and computed
again every set the first two had).
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass, field

import torch

from kernelarena.runtime.inputs import Distribution, Value

DrawKey = tuple[str, int, Distribution]  # workload uuid, seed, distribution


@dataclass
class _Kept:
    inputs: dict[str, Value]
    size: int
    # The reference's outputs in the definition's dtypes (False) and in float64 (True).
    outputs: dict[bool, dict[str, torch.Tensor]] = field(default_factory=dict)


def tensor_bytes(values: dict[str, Value] | dict[str, torch.Tensor]) -> int:
    return sum(v.numel() * v.element_size() for v in values.values() if isinstance(v, torch.Tensor))


# On a GPU: a thirty-second of its memory, at most 4 GiB (two definitions' references keep
# theirs). The rotated sets of a definition's workloads, each filling twice the L2, and their
# outputs come to ~1.4 GB for 8 workloads; with less kept, each solution's jobs cycle through the
# least-recently-used order and nothing kept is found again. On the CPU: 64 MB (the host's memory
# is the sandboxes' too).
GPU_SHARE = 32
GPU_MOST = 4 << 30
CPU_BUDGET = 64 << 20
# A draw over this share of the budget is not kept: large sets are few (two timed sets where two
# fill the L2) and cheap to draw again for their size. What was kept stays: a definition's
# workloads mix small and large shapes, and each solution draws them in turn.
LARGEST_SHARE = 32


def kept_budget(device: torch.device) -> int:
    if device.type != "cuda":
        return CPU_BUDGET
    total = torch.cuda.get_device_properties(device).total_memory
    return min(GPU_MOST, total // GPU_SHARE)


class KeptDraws:
    """At most ``budget`` bytes of draws and their outputs: past it, the other workloads' most
    recently used go first, then the workload's own least recently used (``_trim``)."""

    def __init__(self, budget: int) -> None:
        self.budget = budget
        self._kept: OrderedDict[DrawKey, _Kept] = OrderedDict()
        self._by_tensor: dict[int, DrawKey] = {}  # id of a kept draw's first tensor -> its key
        # The kept bytes, counted as they come and go: summed at every put, hundreds of kept
        # draws cost the judge 17 ms a job on bench_scaling's workloads.
        self._size = 0

    def get(self, key: DrawKey) -> dict[str, Value] | None:
        kept = self._kept.get(key)
        if kept is None:
            return None
        self._kept.move_to_end(key)
        return dict(kept.inputs)

    def keeps(self, size: int) -> bool:
        """Whether a draw of ``size`` bytes would be kept."""
        return size * LARGEST_SHARE <= self.budget

    def put(self, key: DrawKey, inputs: dict[str, Value]) -> None:
        """Kept, the least recently used going first past the budget; a draw over
        ``1 / LARGEST_SHARE`` of the budget is not."""
        size = tensor_bytes(inputs)
        first = next((v for v in inputs.values() if isinstance(v, torch.Tensor)), None)
        if not self.keeps(size) or first is None:
            return
        if key in self._kept:
            self._forget(key)
        self._kept[key] = _Kept(inputs, size)
        self._size += size
        self._by_tensor[id(first)] = key
        self._trim(key[0])

    def outputs(self, inputs: dict[str, Value], precise: bool) -> dict[str, torch.Tensor] | None:
        """The outputs kept for ``inputs`` (in float64 where ``precise``), if they are a kept
        draw's very tensors."""
        found = self._find(inputs)
        return None if found is None else found[1].outputs.get(precise)

    def keep_outputs(
        self, inputs: dict[str, Value], precise: bool, outputs: dict[str, torch.Tensor]
    ) -> None:
        found = self._find(inputs)
        if found is not None and precise not in found[1].outputs:
            key, kept = found
            kept.outputs[precise] = outputs
            added = tensor_bytes(outputs)
            kept.size += added
            self._size += added
            self._trim(key[0])

    def _find(self, inputs: dict[str, Value]) -> tuple[DrawKey, _Kept] | None:
        first = next((v for v in inputs.values() if isinstance(v, torch.Tensor)), None)
        key = self._by_tensor.get(id(first)) if first is not None else None
        kept = self._kept.get(key) if key is not None else None
        if key is None or kept is None or kept.inputs.keys() != inputs.keys():
            return None
        for name, value in kept.inputs.items():
            given = inputs[name]
            same = given is value if isinstance(value, torch.Tensor) else given == value
            if not same:
                return None
        return key, kept

    def _trim(self, workload: str) -> None:
        """Back within the budget, ``workload``'s job running: first the other workloads' draws,
        the most recently used first (the workload finished last is wanted again last, after
        every other; in a run that takes each workload's solutions in turn, never again), then
        ``workload``'s own, the least recently used first."""
        if self._size <= self.budget:
            return
        for key in reversed([k for k in self._kept if k[0] != workload]):
            self._forget(key)
            if self._size <= self.budget:
                return
        while self._kept and self._size > self.budget:
            self._forget(next(iter(self._kept)))

    def _forget(self, key: DrawKey) -> None:
        kept = self._kept.pop(key)
        self._size -= kept.size
        first = next(v for v in kept.inputs.values() if isinstance(v, torch.Tensor))
        self._by_tensor.pop(id(first), None)
