"""Workload tracing: the shapes a real program calls, recorded as workloads of the dataset.

The first call of each key through apply (a new shape, dtype or scalar value) becomes a Workload
tagged ``traced``: its var axes, its scalar arguments as scalars, its tensors as random inputs of
those shapes, or with ``save_tensors`` the tensors themselves in safetensors under
``blob/traced/<definition>/``. Deduplicated across calls and processes: the uuid is derived from
the definition and the axis and scalar values (or, with tensors, from their content), and a uuid
already in the dataset folder is not written again (checked under a file lock). Then
``kernelarena run NAME --suite all`` benchmarks exactly the shapes the program used.
"""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
import threading
import uuid
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch
from filelock import FileLock

from kernelarena.data import (
    Definition,
    RandomInput,
    SafetensorsInput,
    ScalarInput,
    TraceSet,
    Workload,
)

_NAMESPACE = uuid.UUID("3c4f6a52-0b7e-4f0e-8d51-7a1b2c9e5d40")
TRACED_TAG = "traced"


class WorkloadRecorder:
    def __init__(self, dataset: TraceSet, save_tensors: bool = False) -> None:
        if dataset.root is None:
            raise ValueError("tracing writes workloads to a dataset folder; this dataset has none")
        self.dataset = dataset
        self.root = Path(dataset.root)
        self.save_tensors = save_tensors
        self.recorded: list[tuple[str, Workload]] = []
        self._lock = threading.Lock()

    def record(
        self, definition: Definition, axes: dict[str, int], args: Sequence[Any]
    ) -> Workload | None:
        """Add the workload of one call unless the dataset has it; return it when it was added."""
        given = dict(zip(definition.inputs, args, strict=False))  # DPS outputs are not inputs
        listed = {n: int(axes[n]) for n in definition.var_axes}
        scalars = {n: v for n, v in given.items() if definition.inputs[n].shape is None}
        tensors = {n: v for n, v in given.items() if definition.inputs[n].shape is not None}
        inputs: dict[str, Any] = {
            n: ScalarInput(type="scalar", value=scalars[n]) if n in scalars else RandomInput()
            for n in definition.inputs
        }
        blob: dict[str, torch.Tensor] = {}
        if self.save_tensors:
            blob = {n: t.detach().contiguous().cpu() for n, t in tensors.items()}
            identity = f"{definition.name}/tensors/{_content_digest(blob, scalars)}"
        else:
            identity = repr((definition.name, sorted(listed.items()), sorted(scalars.items())))
        workload_id = str(uuid.uuid5(_NAMESPACE, identity))
        if blob:
            path = f"blob/traced/{definition.name}/{workload_id}.safetensors"
            for n in blob:
                inputs[n] = SafetensorsInput(type="safetensors", path=path, tensor_key=n)
        workload = Workload(axes=listed, inputs=inputs, uuid=workload_id, tags=[TRACED_TAG])
        lock_path = self.root / ".traced.lock"
        lock_path.parent.mkdir(parents=True, exist_ok=True)
        with self._lock, FileLock(str(lock_path), timeout=60):
            if workload_id in self._known_ids(definition):
                return None
            if blob:
                _save_atomically(self.root / path, blob)
            self.dataset.definitions.setdefault(definition.name, definition)
            self.dataset.add_workload(definition.name, workload)
            self.recorded.append((definition.name, workload))
        return workload

    def _known_ids(self, definition: Definition) -> set[str]:
        """Workload uuids of this definition in memory and on disk (another process may have
        written some since the dataset was loaded)."""
        known = {w.uuid for w in self.dataset.workloads.get(definition.name, [])}
        path = self.root / "workloads" / definition.op_type / f"{definition.name}.jsonl"
        if path.exists():
            for line in path.read_text(encoding="utf-8").splitlines():
                try:
                    known.add(str(json.loads(line)["workload"]["uuid"]))
                except (ValueError, KeyError, TypeError):
                    continue  # a bad line is the loader's to report
        return known


def _content_digest(tensors: dict[str, torch.Tensor], scalars: dict[str, Any]) -> str:
    digest = hashlib.sha256()
    for name in sorted(tensors):
        tensor = tensors[name]
        digest.update(f"{name}:{tensor.dtype}:{tuple(tensor.shape)};".encode())
        digest.update(tensor.reshape(-1).view(torch.uint8).numpy().tobytes())
    digest.update(repr(sorted(scalars.items())).encode())
    return digest.hexdigest()


def _save_atomically(path: Path, tensors: dict[str, torch.Tensor]) -> None:
    from safetensors.torch import save_file

    path.parent.mkdir(parents=True, exist_ok=True)
    handle, temporary = tempfile.mkstemp(dir=path.parent, prefix=".tmp-", suffix=".safetensors")
    os.close(handle)
    try:
        save_file(tensors, temporary)
        os.replace(temporary, path)
    except BaseException:
        Path(temporary).unlink(missing_ok=True)
        raise
