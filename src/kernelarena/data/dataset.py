"""TraceSet: a dataset folder in FlashInfer-Trace layout, indexed in memory.

Layout (FlashInfer-Bench's): ``definitions/<op_type>/<name>.json``,
``solutions/<op_type>/<definition>/<name>.json``, ``workloads/<op_type>/<definition>.jsonl``,
``traces/<op_type>/<definition>.jsonl``, tensors under ``blob/``.

Loading never stops at the first bad file: every problem is collected with its file and field path,
and the rest of the dataset still loads. Writing never replaces a file that says something else;
traces and workloads are appended one line at a time and flushed to disk.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import TypeVar

from pydantic import ValidationError

from kernelarena.data._base import Schema
from kernelarena.data.dataset_files import append_line as append_line  # re-exported
from kernelarena.data.dataset_writes import DatasetWrites
from kernelarena.data.definition import AxisError, Definition
from kernelarena.data.expressions import ExpressionError
from kernelarena.data.problems import DatasetError as DatasetError  # re-exported
from kernelarena.data.problems import MissingBlob, missing_blob_problems, problems_from_validation
from kernelarena.data.problems import Problem as Problem  # re-exported
from kernelarena.data.solution import FLASHINFER_LANGUAGES, Solution
from kernelarena.data.trace import Trace
from kernelarena.data.workload import SafetensorsInput, ScalarInput, Workload
from kernelarena.data.workload_checks import unmet_constraint_problems

M = TypeVar("M", bound=Schema)


@dataclass
class TraceSet(DatasetWrites):
    root: Path | None = None
    definitions: dict[str, Definition] = field(default_factory=dict)
    solutions: dict[str, Solution] = field(default_factory=dict)
    workloads: dict[str, list[Workload]] = field(default_factory=dict)
    traces: dict[str, list[Trace]] = field(default_factory=dict)
    problems: list[Problem] = field(default_factory=list)
    origin: dict[str, str] = field(default_factory=dict)
    blob_roots: dict[str, Path] = field(default_factory=dict)
    # Workloads that cannot run here (uuid -> why): their safetensors blobs are missing. They stay in
    # ``workloads`` (and are saved), but ``workloads_for`` leaves them out, so runs skip them.
    unavailable: dict[str, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.root is not None and not isinstance(self.root, Path):
            self.root = Path(self.root)  # a string from a user is fine

    # -- loading ------------------------------------------------------------------------------

    @classmethod
    def load(
        cls, root: str | Path, *, strict: bool = False, check_references: bool = True
    ) -> TraceSet:
        """Load a dataset folder. With ``strict``, raise DatasetError listing every problem.

        ``check_references=False`` defers the cross-file checks (a solution's or workload's definition
        exists, axes resolve) to ``check_references()`` after merging with another set that holds the
        definitions, e.g. traces and workloads of the user's for built-in operators."""
        trace_set = cls(root=Path(root))
        trace_set._load_folder(Path(root))
        if check_references:
            trace_set.check_references()
        if strict and trace_set.problems:
            raise DatasetError(trace_set.problems)
        return trace_set

    def _load_folder(self, root: Path) -> None:
        if not root.is_dir():
            self.problems.append(Problem(str(root), "", "dataset folder does not exist"))
            return
        for path in sorted((root / "definitions").rglob("*.json")):
            for definition in self._read_json(Definition, path, root):
                self._index_definition(definition, self._label(path, root))
        for path in sorted((root / "solutions").rglob("*.json")):
            for solution in self._read_json(Solution, path, root):
                self._index_solution(solution, self._label(path, root))
        for path in sorted((root / "workloads").rglob("*.jsonl")):
            for label, trace in self._read_jsonl(path, root):
                if not trace.is_workload:
                    self.problems.append(
                        Problem(label, "", "a workload line must have solution and evaluation null")
                    )
                    continue
                self.blob_roots.setdefault(trace.workload.uuid, root)
                self._index_workload(trace.definition, trace.workload, label)
        for path in sorted((root / "traces").rglob("*.jsonl")):
            for label, trace in self._read_jsonl(path, root):
                if trace.is_workload:
                    self.problems.append(
                        Problem(label, "", "a trace line needs a solution and an evaluation")
                    )
                    continue
                self.traces.setdefault(trace.definition, []).append(trace)

    @staticmethod
    def _label(path: Path, root: Path) -> str:
        try:
            return str(path.relative_to(root.parent))
        except ValueError:
            return str(path)

    def _read_json(self, model: type[M], path: Path, root: Path) -> Iterator[M]:
        label = self._label(path, root)
        try:
            yield model.model_validate_json(path.read_text(encoding="utf-8"))
        except ValidationError as error:
            self.problems += problems_from_validation(label, error)
        except (OSError, UnicodeDecodeError) as error:
            self.problems.append(Problem(label, "", f"cannot read: {error}"))

    def _read_jsonl(self, path: Path, root: Path) -> Iterator[tuple[str, Trace]]:
        label = self._label(path, root)
        try:
            lines = path.read_text(encoding="utf-8").splitlines()
        except (OSError, UnicodeDecodeError) as error:
            self.problems.append(Problem(label, "", f"cannot read: {error}"))
            return
        for number, line in enumerate(lines, start=1):
            if not line.strip():
                continue
            try:
                yield f"{label}:{number}", Trace.model_validate_json(line)
            except ValidationError as error:
                self.problems += problems_from_validation(f"{label}:{number}", error)

    def _index_definition(self, definition: Definition, label: str) -> None:
        if definition.name in self.definitions:
            first = self.origin.get(f"definition:{definition.name}", "?")
            self.problems.append(
                Problem(
                    label, "name", f"duplicate definition '{definition.name}' (also in {first})"
                )
            )
            return
        self.definitions[definition.name] = definition
        self.origin[f"definition:{definition.name}"] = label

    def _index_solution(self, solution: Solution, label: str) -> None:
        if solution.name in self.solutions:
            first = self.origin.get(f"solution:{solution.name}", "?")
            self.problems.append(
                Problem(label, "name", f"duplicate solution '{solution.name}' (also in {first})")
            )
            return
        self.solutions[solution.name] = solution
        self.origin[f"solution:{solution.name}"] = label

    def _index_workload(self, definition: str, workload: Workload, label: str) -> None:
        known = self.workloads.setdefault(definition, [])
        if any(w.uuid == workload.uuid for w in known):
            self.problems.append(
                Problem(label, "workload.uuid", f"duplicate workload uuid '{workload.uuid}'")
            )
            return
        known.append(workload)
        self.origin[f"workload:{workload.uuid}"] = label

    def check_references(self) -> None:
        for name, solution in self.solutions.items():
            if solution.definition not in self.definitions:
                label = self.origin.get(f"solution:{name}", name)
                self.problems.append(
                    Problem(label, "definition", f"unknown definition '{solution.definition}'")
                )
        missing: list[MissingBlob] = []
        for definition_name, workloads in self.workloads.items():
            definition = self.definitions.get(definition_name)
            for workload in workloads:
                label = self.origin.get(f"workload:{workload.uuid}", workload.uuid)
                if definition is None:
                    self.problems.append(
                        Problem(label, "definition", f"unknown definition '{definition_name}'")
                    )
                    continue
                self.problems += [
                    Problem(label, loc, msg)
                    for loc, msg in self.workload_problems(definition, workload)
                ]
                blobs = self.missing_blobs(workload, label)
                if blobs:
                    self.unavailable[workload.uuid] = f"safetensors '{blobs[0].path}' is missing"
                missing += blobs
        self.problems += missing_blob_problems(missing)

    def workload_problems(
        self, definition: Definition, workload: Workload
    ) -> list[tuple[str, str]]:
        """What is wrong with a workload line, missing blobs aside (``missing_blobs``)."""
        problems: list[tuple[str, str]] = []
        try:
            definition.resolve_axes(workload.axes)
        except (AxisError, ExpressionError) as error:
            problems.append(("workload.axes", str(error)))
        for name, spec in definition.inputs.items():
            given = workload.inputs.get(name)
            if given is None:
                problems.append((f"workload.inputs.{name}", 'missing (use {"type": "random"})'))
            elif isinstance(given, ScalarInput) and spec.shape is not None:
                problems.append(
                    (
                        f"workload.inputs.{name}",
                        f"a scalar value for a tensor of shape {spec.shape}",
                    )
                )
        for name in set(workload.inputs) - set(definition.inputs):
            problems.append(
                (f"workload.inputs.{name}", f"'{name}' is not an input of '{definition.name}'")
            )
        return problems + unmet_constraint_problems(definition, workload)

    def missing_blobs(self, workload: Workload, label: str = "") -> list[MissingBlob]:
        """The workload's safetensors inputs whose files are not on disk."""
        missing = []
        for name, given in workload.inputs.items():
            if isinstance(given, SafetensorsInput):
                root = self.blob_root(workload)
                if not (root / given.path).is_file():
                    missing.append(MissingBlob(label or workload.uuid, name, given.path, root))
        return missing

    # -- queries ------------------------------------------------------------------------------

    def solutions_for(self, definition: str) -> list[Solution]:
        return [s for s in self.solutions.values() if s.definition == definition]

    def workloads_for(self, definition: str, tags: Iterable[str] | None = None) -> list[Workload]:
        """The definition's workloads that can run here (missing blobs excluded), by tag."""
        workloads = [
            w for w in self.workloads.get(definition, []) if w.uuid not in self.unavailable
        ]
        if tags is None:
            return list(workloads)
        wanted = set(tags)
        return [w for w in workloads if wanted & set(w.tags or [])]

    def blob_root(self, workload: Workload) -> Path:
        root = self.blob_roots.get(workload.uuid, self.root)
        if root is None:
            raise ValueError(
                f"workload {workload.uuid} reads safetensors but its dataset has no folder"
            )
        return root

    def merge(self, other: TraceSet) -> None:
        """Add everything of ``other``; duplicates become problems, never silent replacements."""
        for name, definition in other.definitions.items():
            self._index_definition(definition, other.origin.get(f"definition:{name}", "(merged)"))
        for name, solution in other.solutions.items():
            self._index_solution(solution, other.origin.get(f"solution:{name}", "(merged)"))
        for definition_name, workloads in other.workloads.items():
            for workload in workloads:
                self._index_workload(
                    definition_name,
                    workload,
                    other.origin.get(f"workload:{workload.uuid}", "(merged)"),
                )
                if workload.uuid in other.blob_roots:
                    self.blob_roots.setdefault(workload.uuid, other.blob_roots[workload.uuid])
                elif other.root is not None:
                    self.blob_roots.setdefault(workload.uuid, other.root)
        for definition_name, traces in other.traces.items():
            self.traces.setdefault(definition_name, []).extend(traces)
        self.problems += other.problems
        self.unavailable.update(other.unavailable)

    def for_flashinfer(self) -> tuple[TraceSet, list[Solution]]:
        """This set as FlashInfer-Bench 0.1.2 can read it: solutions in languages of ours alone
        (``cute_dsl``) and their traces left out; returns the copy and the solutions left out."""
        left_out = [
            s for s in self.solutions.values() if s.spec.language not in FLASHINFER_LANGUAGES
        ]
        names = {s.name for s in left_out}
        copy = dataclasses.replace(
            self,
            solutions={n: s for n, s in self.solutions.items() if n not in names},
            traces={
                d: [t for t in traces if t.solution not in names]
                for d, traces in self.traces.items()
            },
        )
        return copy, left_out
