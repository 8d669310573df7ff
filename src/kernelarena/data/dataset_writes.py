"""What a dataset writes: definitions, solutions and workloads added one at a time (each written
as it is added, when the set has a folder), traces appended and flushed, and the whole set saved as
a new folder. Writing never replaces a file that says something else. A mixin of
``dataset.TraceSet``, which indexes what it reads and what these add.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING

from pydantic import ValidationError

from kernelarena.data._base import Schema
from kernelarena.data.dataset_files import append_line, write_new_bytes
from kernelarena.data.dataset_files import write_lines as _write_lines
from kernelarena.data.dataset_files import write_new as _write_new
from kernelarena.data.definition import Definition
from kernelarena.data.solution import Solution
from kernelarena.data.trace import Trace
from kernelarena.data.workload import SafetensorsInput, Workload


class DatasetWrites:
    """The adding and writing half of ``TraceSet``; ``TraceSet`` holds the fields and indexes."""

    root: Path | None
    definitions: dict[str, Definition]
    solutions: dict[str, Solution]
    workloads: dict[str, list[Workload]]
    traces: dict[str, list[Trace]]
    origin: dict[str, str]
    blob_roots: dict[str, Path]

    if TYPE_CHECKING:

        def _index_definition(self, definition: Definition, label: str) -> None: ...
        def _index_solution(self, solution: Solution, label: str) -> None: ...
        def _index_workload(self, definition: str, workload: Workload, label: str) -> None: ...
        @staticmethod
        def _label(path: Path, root: Path) -> str: ...
        def workload_problems(
            self, definition: Definition, workload: Workload
        ) -> list[tuple[str, str]]: ...
        def blob_root(self, workload: Workload) -> Path: ...

    def add_definition(self, definition: Definition, *, persist: bool = True) -> None:
        """Add a definition (and write it, when the set has a folder). The same definition again
        is a no-op, so a set-up script can run twice; another under a taken name is an error
        that names the name and the file."""
        if self._added_before("definition", definition, self.definitions.get(definition.name)):
            return
        if persist and self.root is not None:
            path = self.root / "definitions" / definition.op_type / f"{definition.name}.json"
            _write_new_model(path, definition, f"definition '{definition.name}'", self.root)
            self._index_definition(definition, self._label(path, self.root))
        else:
            self._index_definition(definition, "(added)")

    def add_solution(self, solution: Solution, *, persist: bool = True) -> None:
        """Add a solution (and write it); the same one again is a no-op, another under a taken
        name an error naming the name and the file, as for definitions."""
        definition = self.definitions.get(solution.definition)
        if definition is None:
            raise ValueError(
                f"solution '{solution.name}': unknown definition '{solution.definition}'"
            )
        if self._added_before("solution", solution, self.solutions.get(solution.name)):
            return
        if persist and self.root is not None:
            folder = self.root / "solutions" / definition.op_type / definition.name
            path = folder / f"{solution.name}.json"
            _write_new_model(path, solution, f"solution '{solution.name}'", self.root)
            self._index_solution(solution, self._label(path, self.root))
        else:
            self._index_solution(solution, "(added)")

    def _added_before(
        self, kind: str, added: Definition | Solution, known: Definition | Solution | None
    ) -> bool:
        """Whether ``added`` is already here as it is (a set-up script run again: a no-op); a
        ValueError naming the name and its file where another holds the name."""
        if known is None:
            return False
        if known.to_json_dict() == added.to_json_dict():
            return True
        where = self.origin.get(f"{kind}:{added.name}", "this dataset")
        raise ValueError(
            f"{kind} '{added.name}' is already in {where} with other content; give the new one "
            "another name (or remove the old one first)"
        )

    def add_workload(
        self, definition_name: str, workload: Workload, *, persist: bool = True
    ) -> None:
        """Add a workload (and append it to the definition's workloads file). It is checked
        against the definition at once: a missing axis or input is a ValueError here, not a
        failure of every solution later. The same workload again (in memory or already in the
        file) is a no-op; another under a taken uuid is an error naming the uuid and the file."""
        definition = self.definitions.get(definition_name)
        if definition is None:
            raise ValueError(
                f"workload '{workload.uuid}': unknown definition '{definition_name}' "
                "(add_definition first)"
            )
        problems = self.workload_problems(definition, workload)
        if problems:
            raise ValueError(
                f"workload '{workload.uuid}' of {definition_name}: "
                + "; ".join(f"{where}: {what}" for where, what in problems)
            )
        path = None
        if persist and self.root is not None:
            path = self.root / "workloads" / definition.op_type / f"{definition_name}.jsonl"
        known = self._same_uuid(definition_name, workload, path)
        if known is not None:
            if known.to_json_dict() != workload.to_json_dict():
                where = self.origin.get(f"workload:{workload.uuid}", "this dataset")
                raise ValueError(
                    f"workload uuid '{workload.uuid}' of {definition_name} is already taken in "
                    f"{where} by another workload; give the new one another uuid"
                )
            if all(w.uuid != workload.uuid for w in self.workloads.get(definition_name, [])):
                label = self.origin.get(f"workload:{workload.uuid}", "(added)")
                self._index_workload(definition_name, known, label)
            return
        self._index_workload(definition_name, workload, "(added)")
        if path is not None and self.root is not None:
            self.blob_roots.setdefault(workload.uuid, self.root)
            line = Trace(
                definition=definition_name, workload=workload, solution=None, evaluation=None
            )
            append_line(path, line, root=self.root)

    def _same_uuid(self, definition: str, workload: Workload, path: Path | None) -> Workload | None:
        """The workload already known under this uuid, in memory or in the file at ``path``."""
        for known in self.workloads.get(definition, []):
            if known.uuid == workload.uuid:
                return known
        if path is None or not path.is_file():
            return None
        for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1):
            if f'"{workload.uuid}"' in line:
                try:
                    found = Trace.model_validate_json(line).workload
                except ValidationError:
                    continue  # a bad line is the loader's to report
                if found.uuid == workload.uuid:
                    self.origin.setdefault(f"workload:{workload.uuid}", f"{path}:{number}")
                    self.blob_roots.setdefault(workload.uuid, path.parents[2])
                    return found
        return None

    def append_trace(self, trace: Trace) -> None:
        """Index a trace and, when the set has a folder, append it to disk and flush."""
        self.traces.setdefault(trace.definition, []).append(trace)
        if self.root is not None:
            op_type = (
                self.definitions[trace.definition].op_type
                if trace.definition in self.definitions
                else "unknown"
            )
            append_line(
                self.root / "traces" / op_type / f"{trace.definition}.jsonl", trace, root=self.root
            )

    def save(self, root: str | Path) -> None:
        """Write the whole set as a new dataset folder (never over a file that differs)."""
        root = Path(root)
        for definition in self.definitions.values():
            _write_new(
                root / "definitions" / definition.op_type / f"{definition.name}.json",
                definition,
                root=root,
            )
        for solution in self.solutions.values():
            op_type = self.definitions[solution.definition].op_type
            _write_new(
                root / "solutions" / op_type / solution.definition / f"{solution.name}.json",
                solution,
                root=root,
            )
        for definition_name, workloads in self.workloads.items():
            op_type = self.definitions[definition_name].op_type
            lines = [
                Trace(definition=definition_name, workload=w, solution=None, evaluation=None)
                for w in workloads
            ]
            _write_lines(
                root / "workloads" / op_type / f"{definition_name}.jsonl", lines, root=root
            )
            for workload in workloads:
                self._copy_blobs(workload, root)
        for definition_name, traces in self.traces.items():
            op_type = (
                self.definitions[definition_name].op_type
                if definition_name in self.definitions
                else "unknown"
            )
            _write_lines(root / "traces" / op_type / f"{definition_name}.jsonl", traces, root=root)

    def _copy_blobs(self, workload: Workload, root: Path) -> None:
        for spec in workload.inputs.values():
            if isinstance(spec, SafetensorsInput):
                source = self.blob_root(workload) / spec.path
                target = root / spec.path
                if source.resolve() == target.resolve() or target.exists():
                    continue
                if not source.is_file():
                    continue  # missing here too: the copy is as complete as the original
                write_new_bytes(target, source.read_bytes(), root=root)


def _write_new_model(path: Path, model: Schema, what: str, root: Path) -> None:
    """Write a new file, or leave one that already holds the same model; another is an error."""
    if path.is_file():
        try:
            same = json.loads(path.read_text(encoding="utf-8")) == model.to_json_dict()
        except (OSError, ValueError):
            same = False
        if same:
            return
        raise FileExistsError(
            f"{what}: {path} holds another one of that name; not replacing it (give the new one "
            "another name, or delete the file)"
        )
    _write_new(path, model, root=root)
