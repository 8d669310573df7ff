"""Keep benchmarks/results/ to what a reader needs: the newest run of each benchmark on each device,
and every result a document, log, script or test names. The rest is superseded: this script lists it
(a dry run) or, with ``--apply``, removes it with ``git rm``; its history stays in git.

A result is ``<benchmark>_<device>_<YYYY-MM-DD>[_<label>].<ext>`` directly in the folder (logs/ is
the story, never pruned). One run is a result with the files that go with it: the same stem with
another extension (a report's .md beside its .json) and its companions (``_compile_traces``, which
``compare_compile_traces.py`` writes beside a run). A run's time is the latest
``environment.date`` its JSON files record. The newest run of each (benchmark, device) stays whole,
and so does every run with a cited file, and every run that records no time (a note such as
``..._reproduce.md``: nothing says it is superseded).

Cited means named anywhere in README.md, docs/, benchmarks/, tests/ or src/ (the run's own files
aside), in any of the ways the logs and docs name results:

- by file name, or by its name without the extension;
- by a pattern whose text before its first wildcard holds an underscore: ``apply_overhead_*.json``,
  ``engine_nvidia-h200_2026-11-23_{as-found,bytecode}.json``, ``vs_flashinfer_bench_<device>_
  2026-11-25_s4[a].json`` (not ``*.json``, C's ``float*``, or ``norms_<gpu>_<date>.json``: a
  template without a date);
- in prose (.md, .txt), by the end of its name written after another's: ``_s10b.json``,
  ``..._first4.md``.

    python benchmarks/prune_results.py            # list what would go
    python benchmarks/prune_results.py --apply    # git rm it
"""

from __future__ import annotations

import argparse
import fnmatch
import itertools
import json
import re
import subprocess
from collections import defaultdict
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
RESULTS = Path(__file__).resolve().parent / "results"
CITING = ("README.md", "docs", "benchmarks", "tests", "src")
COMPANIONS = ("_compile_traces",)
RESULT_NAME = re.compile(
    r"(?P<benchmark>.+)_(?P<device>[a-z0-9-]+)_(?P<date>\d{4}-\d{2}-\d{2})(?:_(?P<label>.+))?"
)
# A name with a wildcard, a {a,b} choice, a <placeholder> or an optional [a], as documents cite a
# set of results.
PATTERN = re.compile(r"[\w.\-]*(?:\*|\{[\w.\-,]*\}|<[\w-]+>|\[[\w-]*\])[\w.\-*{},<>\[\]]*")
DATE = re.compile(r"\d{4}-\d{2}-\d{2}")
# The end of a result's name, written after the full name of another: `_s10b.json`, ..._first4.md.
ABBREVIATED = re.compile(r"(?:^|[^\w.-]|\.\.\.)(_[\w-]+(?:\.(?:json|md))?)(?![\w-])", re.MULTILINE)
SKIPPED_FOLDERS = {"__pycache__", ".git", ".venv", "node_modules"}


@dataclass
class Run:
    """One run of a benchmark on a device: its files and when it ran ("" where none records it)."""

    benchmark: str
    device: str
    stem: str
    files: list[Path] = field(default_factory=list)
    time: str = ""


def runs(folder: Path) -> list[Run]:
    """The results in ``folder`` as runs (files whose names are no result are left alone)."""
    found: dict[str, Run] = {}
    for path in sorted(p for p in folder.iterdir() if p.is_file()):
        match = RESULT_NAME.fullmatch(path.stem)
        if match is None:
            continue
        stem = path.stem
        for companion in COMPANIONS:
            stem = stem.removesuffix(companion)
        run = found.setdefault(stem, Run(match["benchmark"], match["device"], stem))
        run.files.append(path)
        run.time = max(run.time, _recorded_time(path) or "")
    return list(found.values())


def _recorded_time(path: Path) -> str | None:
    """The ``environment.date`` a JSON result records (ISO 8601, so it sorts as text)."""
    if path.suffix != ".json":
        return None
    try:
        report = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    environment = report.get("environment") if isinstance(report, dict) else None
    date = environment.get("date") if isinstance(environment, dict) else None
    return date if isinstance(date, str) else None


def citing_texts(repo: Path, roots: Iterable[str] = CITING) -> Iterator[tuple[Path, str]]:
    """Every text file under ``roots`` (files or folders of ``repo``)."""
    for root in roots:
        top = repo / root
        paths = [top] if top.is_file() else sorted(top.rglob("*")) if top.is_dir() else []
        for path in paths:
            relative = path.relative_to(repo)
            if not path.is_file() or SKIPPED_FOLDERS & set(relative.parts):
                continue
            if path == Path(__file__).resolve():  # its own examples cite nothing
                continue
            try:
                yield path, path.read_text(encoding="utf-8")
            except (OSError, UnicodeDecodeError):
                continue


def expand_choices(pattern: str) -> list[str]:
    """``a_{x,y}.json`` -> ``a_x.json``, ``a_y.json`` (every brace, in every combination), with
    ``<device>`` read as ``*`` and an optional ``[a]`` as ``{,a}``."""
    pattern = re.sub(r"<[\w-]+>", "*", pattern)
    pattern = re.sub(r"\[([\w-]*)\]", r"{,\1}", pattern)
    parts = re.split(r"\{([^{}]*)\}", pattern)
    literal, choices = parts[0::2], [p.split(",") for p in parts[1::2]]
    return [
        "".join(itertools.chain.from_iterable(itertools.zip_longest(literal, picked, fillvalue="")))
        for picked in itertools.product(*choices)
    ]


def cited(all_runs: Iterable[Run], texts: Iterable[tuple[Path, str]]) -> set[str]:
    """The runs (by stem) whose files a text names, the run's own files aside: by file name, by
    name without the extension, by a pattern, or (in prose: .md and .txt) by the end of a name
    written after a full one."""
    run_of = {path: run.stem for run in all_runs for path in run.files}
    if not run_of:
        return set()
    paths = list(run_of)
    by_stem: dict[str, list[Path]] = defaultdict(list)
    for path in paths:
        by_stem[path.stem].append(path)
    stems = sorted(by_stem, key=len, reverse=True)  # the longest name first where one holds another
    named = re.compile(rf"(?<![\w-])({'|'.join(map(re.escape, stems))})(?![\w-])")
    found: set[str] = set()
    for source, text in texts:
        mentioned = {path for stem in named.findall(text) for path in by_stem[stem]}
        patterns = [
            choice
            for token in PATTERN.findall(text)
            if "<" not in token or DATE.search(token)  # norms_<gpu>_<date>.json is a template
            for choice in expand_choices(token)
            if "_" in choice.partition("*")[0]  # a benchmark's name, not C's `float*`
        ]
        mentioned |= {p for p in paths if any(_matches(p, pattern) for pattern in patterns)}
        if source.suffix in (".md", ".txt"):
            mentioned |= {p for p in paths if any(_ends(p, e) for e in _name_ends(text))}
        found |= {run_of[p] for p in mentioned} - {run_of.get(source)}
    return found


def _matches(path: Path, pattern: str) -> bool:
    """Whether ``pattern`` names ``path``: as a whole name, or with the extension left out."""
    return fnmatch.fnmatchcase(path.name, pattern) or fnmatch.fnmatchcase(path.stem, pattern)


def _name_ends(text: str) -> set[str]:
    """What prose writes for a result named just before: ``_s10b.json``, ``_s12_attention``,
    ``..._first4.md`` (a companion's suffix alone names no run)."""
    ends = {m.group(1) for m in ABBREVIATED.finditer(text)}
    return {e for e in ends if e.removesuffix(".json") not in COMPANIONS}


def _ends(path: Path, end: str) -> bool:
    return (
        path.name.endswith(end) if Path(end).suffix in (".json", ".md") else path.stem.endswith(end)
    )


def superseded(folder: Path, repo: Path, roots: Iterable[str] = CITING) -> list[Path]:
    """The files of every run that is neither the newest of its benchmark on its device nor cited."""
    all_runs = runs(folder)
    kept = cited(all_runs, citing_texts(repo, roots))
    groups: dict[tuple[str, str], list[Run]] = defaultdict(list)
    for run in all_runs:
        groups[(run.benchmark, run.device)].append(run)
    going = []
    for group in groups.values():
        newest = max(group, key=lambda run: (run.time, run.stem))
        for run in group:
            if run is newest or not run.time or run.stem in kept:
                continue
            going.extend(run.files)
    return sorted(going)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--apply", action="store_true", help="git rm the superseded files")
    parser.add_argument(
        "--cited-in",
        action="append",
        metavar="PATH",
        help=f"where a citation counts, a file or folder of the repository (repeatable; default: "
        f"{', '.join(CITING)})",
    )
    arguments = parser.parse_args()
    going = superseded(RESULTS, REPO, arguments.cited_in or CITING)
    for path in going:
        print(path.relative_to(REPO))
    print(f"{len(going)} superseded file(s)" + ("" if arguments.apply else " (dry run)"))
    if arguments.apply and going:
        subprocess.run(["git", "rm", "-q", *map(str, going)], cwd=REPO, check=True)


if __name__ == "__main__":
    main()
