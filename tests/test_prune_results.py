"""benchmarks/prune_results.py's rule, on a folder made here: the newest run of each benchmark on
each device stays with its companions, and so does every run something cites or that records no
time; the rest goes."""

from __future__ import annotations

import json
from pathlib import Path

from benchmarks import prune_results


def _result(folder: Path, name: str, recorded: str | None = None) -> None:
    """A result file; ``recorded`` is the time its run records (none for companions and notes)."""
    report = {"rows": [], "note": f"written as {name}"}  # a result naming itself cites nothing
    if recorded is not None:
        report["environment"] = {"date": f"{recorded}+00:00"}
    (folder / name).write_text(json.dumps(report) if name.endswith(".json") else f"# {name}\n")


def _write(repo: Path, relative: str, text: str) -> None:
    path = repo / relative
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)


def test_superseded_runs_go_and_the_newest_cited_and_timeless_stay(tmp_path: Path) -> None:
    results = tmp_path / "benchmarks" / "results"
    results.mkdir(parents=True)
    for name, recorded in [
        ("norms_gpu-a_2026-01-01.json", "2026-01-01T10:00:00"),
        ("norms_gpu-a_2026-01-01_compile_traces.json", None),
        ("norms_gpu-a_2026-01-02_s2.json", "2026-01-02T09:00:00"),
        ("norms_gpu-a_2026-01-02_s3.json", "2026-01-02T12:00:00"),
        ("norms_gpu-a_2026-01-02_s3_compile_traces.json", None),
        ("norms_gpu-b_2026-01-01.json", "2026-01-01T08:00:00"),
        ("apply_gpu-a_2026-01-01_run-a.json", "2026-01-01T01:00:00"),
        ("apply_gpu-a_2026-01-01_run-b.json", "2026-01-01T02:00:00"),
        ("apply_gpu-a_2026-01-03.json", "2026-01-03T00:00:00"),
        ("engine_gpu-a_2026-01-01_x.json", "2026-01-01T00:00:00"),
        ("engine_gpu-a_2026-01-01_y.json", "2026-01-01T00:01:00"),
        ("engine_gpu-a_2026-01-05.json", "2026-01-05T00:00:00"),
        ("scale_gpu-a_2026-01-01.json", "2026-01-01T00:00:00"),
        ("scale_gpu-a_2026-01-02.json", "2026-01-02T00:00:00"),
        ("vs_gpu-a_2026-01-01_s4a.json", "2026-01-01T00:00:00"),
        ("vs_gpu-a_2026-01-01_s5.json", "2026-01-01T01:00:00"),
        ("vs_gpu-a_2026-01-02_s7.json", "2026-01-02T00:00:00"),
        ("study_gpu-a_2026-01-01_reproduce.md", None),
        ("study_gpu-a_2026-01-01_first.json", "2026-01-01T00:00:00"),
        ("study_gpu-a_2026-01-01_first.md", None),
        ("study_gpu-a_2026-01-02.json", "2026-01-02T00:00:00"),
    ]:
        _result(results, name, recorded)
    _write(tmp_path, "benchmarks/results/logs/run.txt", "wrote norms_gpu-a_2026-01-01_s9.json\n")
    _write(tmp_path, "README.md", "Every scale run: `benchmarks/results/scale_*.json`.\n")
    _write(tmp_path, "docs/x.md", "See apply_gpu-a_2026-01-01_run-a and `engine_gpu-a_2026-01-01_{x,y}.json`.\n")  # fmt: skip
    _write(tmp_path, "docs/y.md", "Files: `vs_<device>_2026-01-01_s4[a].json`.\n")
    _write(tmp_path, "benchmarks/results/logs/story.md", "norms_gpu-a_2026-01-02_s3.json, `_s2.json`.\n")  # fmt: skip
    # A naming template, C's pointer type and a companion's suffix name no result.
    _write(tmp_path, "src/writer.py", '"""Writes results/study_<gpu>_<date>.json, then _compile_traces.json."""\n')  # fmt: skip
    _write(tmp_path, "src/kernel.cu", "const study* p; norms* q;\n")

    going = prune_results.superseded(results, tmp_path)

    assert [p.name for p in going] == [
        "apply_gpu-a_2026-01-01_run-b.json",
        "norms_gpu-a_2026-01-01.json",
        "norms_gpu-a_2026-01-01_compile_traces.json",
        "study_gpu-a_2026-01-01_first.json",
        "study_gpu-a_2026-01-01_first.md",
        "vs_gpu-a_2026-01-01_s5.json",
    ]


def test_choices_expand_in_every_combination() -> None:
    assert prune_results.expand_choices("a_{x,y}_{1,2}.json") == [
        "a_x_1.json",
        "a_x_2.json",
        "a_y_1.json",
        "a_y_2.json",
    ]
    assert prune_results.expand_choices("vs_<device>_s4[a].json") == [
        "vs_*_s4.json",
        "vs_*_s4a.json",
    ]
