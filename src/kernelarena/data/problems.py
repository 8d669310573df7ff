"""Problems found while loading a dataset, each naming its file and field, and missing blobs grouped.

A published FlashInfer-Trace dataset keeps its safetensors blobs apart (a Git LFS store, a Hugging Face
repository), so a checkout often has the workload lines without the blobs: one folder of blobs per
definition, one file per workload, several tensors per file. One line per tensor would bury every other
problem; ``missing_blob_problems`` says it once per missing folder, or per missing file where the
folder is there.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

from pydantic import ValidationError


@dataclass(frozen=True)
class Problem:
    file: str
    location: str
    message: str

    def __str__(self) -> str:
        where = f"{self.file}: {self.location}" if self.location else self.file
        return f"{where}: {self.message}"


class DatasetError(ValueError):
    def __init__(self, problems: list[Problem]) -> None:
        self.problems = problems
        shown = "\n".join(f"  {p}" for p in problems[:50])
        more = f"\n  ... and {len(problems) - 50} more" if len(problems) > 50 else ""
        super().__init__(f"{len(problems)} problem(s) in the dataset:\n{shown}{more}")


def problems_from_validation(file: str, error: ValidationError, prefix: str = "") -> list[Problem]:
    problems = []
    for item in error.errors():
        location = ".".join(str(p) for p in item["loc"])
        message = str(item["msg"]).removeprefix("Value error, ")
        for part in message.split("; "):
            # Cross-field checks name their own field first ("inputs.x.shape[1]: ...").
            head, sep, rest = part.partition(": ")
            if sep and not location and " " not in head:
                problems.append(Problem(file, prefix + head, rest))
            else:
                problems.append(Problem(file, prefix + location, part))
    return problems


@dataclass(frozen=True)
class MissingBlob:
    """One input of one workload whose safetensors file is not on disk."""

    label: str  # where the workload line is: "workloads/<op>/<definition>.jsonl:<line>"
    input: str
    path: str  # as the workload writes it, relative to the dataset root
    root: Path


def missing_blob_problems(missing: Iterable[MissingBlob]) -> list[Problem]:
    """One problem per missing blob folder (or file, where its folder exists) and workloads file."""
    groups: dict[tuple[str, str, bool], list[MissingBlob]] = {}
    for blob in missing:
        file, _ = _split_label(blob.label)
        folder = PurePosixPath(blob.path.replace("\\", "/")).parent
        folder_missing = str(folder) not in ("", ".") and not (blob.root / folder).is_dir()
        key = (file, f"{folder}/" if folder_missing else blob.path, folder_missing)
        groups.setdefault(key, []).append(blob)
    problems = []
    for (file, shown, folder_missing), blobs in groups.items():
        lines = sorted({line for b in blobs if (line := _split_label(b.label)[1]) is not None})
        where = f"{file}:{_ranges(lines)}" if lines else file
        inputs = sorted({b.input for b in blobs})
        field = inputs[0] if len(inputs) == 1 else "{" + ",".join(inputs) + "}"
        workloads = len({b.label for b in blobs})
        skipped = (
            "the workload is skipped"
            if workloads == 1
            else f"its {workloads} workloads are skipped"
        )
        if folder_missing:
            files = len({b.path for b in blobs})
            what = f"folder '{shown}' does not exist ({files} safetensors file(s) expected in it)"
        else:
            what = f"file '{shown}' does not exist"
        problems.append(Problem(where, f"workload.inputs.{field}.path", f"{what}: {skipped}"))
    return problems


def _split_label(label: str) -> tuple[str, int | None]:
    file, sep, line = label.rpartition(":")
    if sep and line.isdigit():
        return file, int(line)
    return label, None


def _ranges(lines: list[int]) -> str:
    """[1, 2, 3, 7] -> '1-3,7'."""
    parts: list[str] = []
    start = previous = lines[0]
    for line in [*lines[1:], None]:
        if line is not None and line == previous + 1:
            previous = line
            continue
        parts.append(str(start) if start == previous else f"{start}-{previous}")
        if line is not None:
            start = previous = line
    return ",".join(parts)
