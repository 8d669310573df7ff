"""Build a FlashInfer-Trace dataset of FlashInfer-Bench's published CUDA solutions, from a git mirror.

The solutions come from ``bench/test/results`` of flashinfer-bench's commit 4def975f (pull request
221, not on its main branch): runs of several models, each a folder whose ``definitions``,
``workloads`` and ``blob`` entries are symbolic links to the author's machine, so they dangle here.
The definitions and workloads are taken from ``flashinfer_trace/`` of the same commit instead.

Selected: every solution with ``binding: torch`` whose definition is named ``rmsnorm_*``,
``fused_add_rmsnorm_*`` or ``gemm_*`` and has a workloads file whose inputs need no blob (no
``safetensors`` input). A solution published twice under one name with the same sources is kept
once; the same name with other sources stops the extraction (which one would a table mean?).

Nothing is copied into the repository: the dataset is made at run time with ``git show``, into
``--out`` (by default ``.fib-published/``, kept out of git through ``.git/info/exclude``), with
``extracted.json`` at its root saying where every file came from and what was left out and why.

    python benchmarks/published/extract.py --mirror /work/.mirror/flashinfer-ai+flashinfer-bench/repo
"""

from __future__ import annotations

import argparse
import hashlib
import json
import shutil
import subprocess
import sys
from collections import Counter, defaultdict
from dataclasses import dataclass
from pathlib import Path
from typing import Any

COMMIT = "4def975f"
RESULTS_PREFIX = "bench/test/results/"
TRACE_PREFIX = "flashinfer_trace/"
FAMILIES = ("rmsnorm_", "fused_add_rmsnorm_", "gemm_")
EXPECTED_SOLUTIONS = 47  # issue 37's count of distinct solutions for these families
MANIFEST = "extracted.json"


class Git:
    """Reads one commit of a bare mirror, as ``git --git-dir=MIRROR show COMMIT:PATH`` does."""

    def __init__(self, mirror: Path, commit: str) -> None:
        self.mirror = mirror
        self.commit = self._run("rev-parse", "--verify", f"{commit}^{{commit}}").strip()

    def _run(self, *arguments: str) -> str:
        command = ["git", f"--git-dir={self.mirror}", *arguments]
        finished = subprocess.run(command, capture_output=True, text=True, check=False)
        if finished.returncode != 0:
            raise SystemExit(f"{' '.join(command)}: {finished.stderr.strip()}")
        return finished.stdout

    def files(self, prefix: str) -> list[str]:
        """Paths of the regular files under ``prefix`` (symbolic links left out: they dangle)."""
        listing = self._run("ls-tree", "-r", self.commit, prefix)
        paths = []
        for line in listing.splitlines():
            mode_type_hash, path = line.split("\t", 1)
            if mode_type_hash.split()[0] == "100644":
                paths.append(path)
        return paths

    def show(self, path: str) -> str:
        return self._run("show", f"{self.commit}:{path}")


@dataclass(frozen=True)
class Published:
    path: str  # inside the commit
    data: dict[str, Any]

    @property
    def name(self) -> str:
        return str(self.data["name"])

    @property
    def definition(self) -> str:
        return str(self.data["definition"])

    @property
    def sources_hash(self) -> str:
        sources = json.dumps(self.data.get("sources"), sort_keys=True).encode()
        return hashlib.sha256(sources).hexdigest()[:16]


def blob_free_workloads(git: Git) -> dict[str, tuple[str, list[str]]]:
    """Definition name -> (op_type, workload lines), for every workloads file whose inputs are
    all random or scalar (a safetensors input needs a blob the commit does not hold)."""
    found = {}
    for path in git.files(f"{TRACE_PREFIX}workloads/"):
        if not path.endswith(".jsonl"):
            continue
        lines = [line for line in git.show(path).splitlines() if line.strip()]
        kinds = {
            spec.get("type")
            for line in lines
            for spec in json.loads(line)["workload"]["inputs"].values()
        }
        if lines and "safetensors" not in kinds:
            op_type = path.split("/")[-2]
            found[Path(path).stem] = (op_type, lines)
    return found


def published_solutions(git: Git) -> list[Published]:
    return [
        Published(path, json.loads(git.show(path)))
        for path in git.files(RESULTS_PREFIX)
        if "/solutions/" in path and path.endswith(".json")
    ]


def why_left_out(solution: Published, workloads: dict[str, tuple[str, list[str]]]) -> str | None:
    spec = solution.data.get("spec", {})
    if spec.get("binding") != "torch":
        return f"binding {spec.get('binding')!r}"
    if solution.definition not in workloads:
        return "its definition's workloads need blobs, or it has none at this commit"
    if not solution.definition.startswith(FAMILIES):
        return "blob-free, but outside rmsnorm_/fused_add_rmsnorm_/gemm_"
    return None


def select(
    solutions: list[Published], workloads: dict[str, tuple[str, list[str]]]
) -> tuple[dict[str, Published], dict[str, list[str]], Counter[str]]:
    """The distinct selected solutions by name, the duplicates' paths, and the reasons the rest
    were left out (counted)."""
    chosen: dict[str, Published] = {}
    duplicates: dict[str, list[str]] = defaultdict(list)
    left_out: Counter[str] = Counter()
    for solution in sorted(solutions, key=lambda s: s.path):
        reason = why_left_out(solution, workloads)
        if reason:
            left_out[reason] += 1
        elif solution.name not in chosen:
            chosen[solution.name] = solution
        elif chosen[solution.name].sources_hash == solution.sources_hash:
            duplicates[solution.name].append(solution.path)
        else:
            raise SystemExit(
                f"solution {solution.name!r} is published with different sources in "
                f"{chosen[solution.name].path} and {solution.path}"
            )
    return chosen, dict(duplicates), left_out


def write_json(path: Path, data: Any) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(data, indent=2) + "\n")


def write_dataset(
    git: Git,
    out: Path,
    chosen: dict[str, Published],
    workloads: dict[str, tuple[str, list[str]]],
) -> dict[str, str]:
    """definitions/, workloads/ and solutions/ under ``out``; returns definition -> op_type."""
    used = sorted({solution.definition for solution in chosen.values()})
    op_types = {}
    for definition in used:
        op_type, lines = workloads[definition]
        op_types[definition] = op_type
        source = f"{TRACE_PREFIX}definitions/{op_type}/{definition}.json"
        (out / "definitions" / op_type).mkdir(parents=True, exist_ok=True)
        (out / "definitions" / op_type / f"{definition}.json").write_text(git.show(source))
        (out / "workloads" / op_type).mkdir(parents=True, exist_ok=True)
        (out / "workloads" / op_type / f"{definition}.jsonl").write_text("\n".join(lines) + "\n")
    for name, solution in chosen.items():
        folder = out / "solutions" / op_types[solution.definition] / solution.definition
        write_json(folder / f"{name}.json", solution.data)
    return op_types


def manifest(
    git: Git,
    chosen: dict[str, Published],
    duplicates: dict[str, list[str]],
    left_out: Counter[str],
    workloads: dict[str, tuple[str, list[str]]],
) -> dict[str, Any]:
    per_definition = Counter(solution.definition for solution in chosen.values())
    return {
        "source": "github.com/flashinfer-ai/flashinfer-bench",
        "commit": git.commit,
        "solutions_from": RESULTS_PREFIX,
        "definitions_and_workloads_from": TRACE_PREFIX,
        "selection": "binding torch; definitions rmsnorm_*, fused_add_rmsnorm_*, gemm_* whose "
        "workloads need no blob",
        "solution_count": len(chosen),
        "solutions_per_definition": dict(sorted(per_definition.items())),
        "workloads_per_definition": {
            definition: len(workloads[definition][1]) for definition in sorted(per_definition)
        },
        "solutions": {
            name: {
                "definition": solution.definition,
                "path": solution.path,
                "destination_passing_style": solution.data["spec"].get(
                    "destination_passing_style", True
                ),
            }
            for name, solution in sorted(chosen.items())
        },
        "duplicates_dropped": duplicates,
        "left_out": dict(left_out),
    }


def extract(mirror: Path, commit: str, out: Path) -> dict[str, Any]:
    git = Git(mirror, commit)
    workloads = blob_free_workloads(git)
    chosen, duplicates, left_out = select(published_solutions(git), workloads)
    if out.exists():
        if not (out / MANIFEST).is_file():
            raise SystemExit(f"{out} exists and is not a dataset this script made")
        shutil.rmtree(out)
    write_dataset(git, out, chosen, workloads)
    summary = manifest(git, chosen, duplicates, left_out, workloads)
    write_json(out / MANIFEST, summary)
    return summary


def folder_size(path: Path) -> int:
    return sum(file.stat().st_size for file in path.rglob("*") if file.is_file())


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--mirror", type=Path, required=True, help="bare git mirror (git dir)")
    parser.add_argument("--commit", default=COMMIT, help=f"default: {COMMIT}")
    parser.add_argument("--out", type=Path, default=Path(".fib-published"))
    arguments = parser.parse_args()
    summary = extract(arguments.mirror, arguments.commit, arguments.out)
    print(f"commit {summary['commit']}: {summary['solution_count']} solutions")
    for definition, count in summary["solutions_per_definition"].items():
        workloads = summary["workloads_per_definition"][definition]
        print(f"  {definition:<26} {count} solution(s) x {workloads} workloads")
    for name, paths in summary["duplicates_dropped"].items():
        print(f"  published again, same sources, kept once: {name} ({len(paths)} more)")
    for reason, count in sorted(summary["left_out"].items()):
        print(f"  left out: {count} solution file(s): {reason}")
    size = folder_size(arguments.out)
    print(f"wrote {arguments.out} ({size / 2**20:.2f} MiB)")
    if summary["solution_count"] != EXPECTED_SOLUTIONS:
        print(f"expected {EXPECTED_SOLUTIONS} solutions (issue 37)", file=sys.stderr)
        sys.exit(1)


if __name__ == "__main__":
    main()
