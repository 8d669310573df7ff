"""A judge's references by definition: each sandboxed (``reference_sandbox``), or run in the
judge where references are left unconfined, kept alive across the jobs of its definition.
"""

from __future__ import annotations

import os
from collections import OrderedDict

import torch

from kernelarena.data import Definition
from kernelarena.evaluate.judge.reference_sandbox import SandboxedReference
from kernelarena.evaluate.judge.references import InJudgeReference, Reference, ReferenceFailed
from kernelarena.evaluate.options import REFERENCES_UNCONFINED, references_sandboxed
from kernelarena.evaluate.sandbox.sandboxes import Sandboxes


class References:
    """A judge's references by definition: sandboxed ones kept alive for the last ``limit``
    definitions (their jobs mostly come together; ``KERNELARENA_REFERENCE_SANDBOXES``), a
    definition whose reference cannot load remembered so its later jobs fail at once."""

    def __init__(self, device: torch.device, sandboxes: Sandboxes) -> None:
        self.device = device
        self.sandboxes = sandboxes
        # A GPU sandbox holds a CUDA context and its allocator's cache; a CPU one, forked from
        # the zygote, shares most of its memory with it.
        default = "2" if device.type == "cuda" else "8"
        self.limit = int(os.environ.get("KERNELARENA_REFERENCE_SANDBOXES", default))
        self.sandboxed = references_sandboxed()
        if not self.sandboxed:
            print(REFERENCES_UNCONFINED, flush=True)
        self._kept: OrderedDict[str, Reference] = OrderedDict()
        self._unloadable: dict[str, ReferenceFailed] = {}

    def get(self, definition: Definition, timeout_s: float) -> Reference:
        key = definition.content_hash()
        if key in self._unloadable:
            raise self._unloadable[key]
        reference = self._kept.pop(key, None)
        try:
            if reference is None:
                reference = self._make(definition)
            reference.ready(timeout_s)
        except ReferenceFailed as failed:
            if failed.permanent:
                self._unloadable[key] = failed
                if reference is not None:
                    reference.close()
            elif reference is not None:
                self._kept[key] = reference  # started again next time
            raise
        self._kept[key] = reference
        while self.sandboxed and len(self._kept) > self.limit:
            self._kept.popitem(last=False)[1].close()
        return reference

    def _make(self, definition: Definition) -> Reference:
        if self.sandboxed:
            return SandboxedReference(definition, self.device, self.sandboxes)
        return InJudgeReference(definition)

    def close(self) -> None:
        for reference in self._kept.values():
            reference.close()
        self._kept.clear()
