"""Which jobs take their judge longer when more devices run at once, and in which stages.

``bench_scaling`` keeps, for every run, each job's stages in milliseconds
(``job_stages.job_record``). Set against each other, the one-device run and the widest one say
whether the slowdown is spread over every job (something every judge does: the host's CPU, a
lock) or held by a few (large workloads: allocations, the driver, host memory), and which stages
grow. The stage paths are those of ``stage_clock`` (self times; a stage's time with what is nested
in it is the sum over its subtree).
"""

from __future__ import annotations

import statistics
from collections import defaultdict
from typing import Any

from kernelarena.evaluate.executors.job_stages import PHASES

# Jobs are sorted into these bands by their judge's time in the one-device run (ms).
BANDS = ((0.0, 250.0), (250.0, 1000.0), (1000.0, float("inf")))


def judge_ms(record: dict[str, Any]) -> float:
    return sum(v for path, v in record["ms"].items() if path.split("/", 1)[0] in PHASES)


def _inclusive(ms: dict[str, float]) -> dict[str, float]:
    """Each stage's time with what is nested in it, at every depth."""
    found: dict[str, float] = defaultdict(float)
    for path, value in ms.items():
        parts = path.split("/")
        for depth in range(1, len(parts) + 1):
            found["/".join(parts[:depth])] += value
    return found


def growth(single: dict[str, Any], wide: dict[str, Any], top: int = 8) -> dict[str, Any]:
    """The per-job comparison of two runs' ``per_job`` records: by band of one-device judge
    time (jobs, ms per job before and after, the stages that grew most in all), by definition
    (the median ratio), and the ``top`` jobs that grew most, with their largest stage growths."""
    common = sorted(set(single) & set(wide))
    bands = []
    for low, high in BANDS:
        keys = [k for k in common if low <= judge_ms(single[k]) < high]
        if not keys:
            continue
        before = sum(judge_ms(single[k]) for k in keys)
        after = sum(judge_ms(wide[k]) for k in keys)
        bands.append(
            {
                "band_ms": [low, high],
                "jobs": len(keys),
                "ms_per_job_before": round(before / len(keys), 1),
                "ms_per_job_after": round(after / len(keys), 1),
                "grown_stages_ms": _grown(keys, single, wide, 6),
            }
        )
    by_definition: dict[str, list[float]] = defaultdict(list)
    for key in common:
        before = judge_ms(single[key])
        if before > 0:
            by_definition[key.split("/", 1)[0]].append(judge_ms(wide[key]) / before)
    ranked = sorted(common, key=lambda k: judge_ms(wide[k]) - judge_ms(single[k]), reverse=True)
    return {
        "bands": bands,
        "median_ratio_by_definition": {
            name: round(statistics.median(ratios), 3)
            for name, ratios in sorted(by_definition.items())
        },
        "most_grown": [
            {
                "job": key,
                "axes": single[key]["axes"],
                "ms_before": round(judge_ms(single[key]), 1),
                "ms_after": round(judge_ms(wide[key]), 1),
                "grown_stages_ms": _grown([key], single, wide, 3),
            }
            for key in ranked[:top]
        ],
    }


def _grown(
    keys: list[str], single: dict[str, Any], wide: dict[str, Any], count: int
) -> dict[str, float]:
    """The nested stages (two levels down or deeper) whose summed time over ``keys`` grew most."""
    delta: dict[str, float] = defaultdict(float)
    for key in keys:
        before, after = _inclusive(single[key]["ms"]), _inclusive(wide[key]["ms"])
        for path in set(before) | set(after):
            if "/" in path:
                delta[path] += after.get(path, 0.0) - before.get(path, 0.0)
    biggest = sorted(delta.items(), key=lambda item: (-item[1], item[0]))[:count]
    return {path: round(value, 1) for path, value in biggest}


def growth_lines(found: dict[str, Any], label: str) -> list[str]:
    lines = [f"where the judges' time grew, one device against {label}:"]
    for band in found["bands"]:
        low, high = band["band_ms"]
        stages = ", ".join(f"{p} {v:+.0f}" for p, v in band["grown_stages_ms"].items())
        lines.append(
            f"  jobs of {low:.0f}-{high:.0f} ms alone: {band['jobs']}, "
            f"{band['ms_per_job_before']} -> {band['ms_per_job_after']} ms a job; "
            f"grown most (ms in all): {stages}"
        )
    ratios = ", ".join(f"{n} {r}x" for n, r in found["median_ratio_by_definition"].items())
    lines.append(f"  median ratio by definition: {ratios}")
    for job in found["most_grown"]:
        stages = ", ".join(f"{p} {v:+.0f}" for p, v in job["grown_stages_ms"].items())
        lines.append(
            f"  {job['job']} {job['axes']}: {job['ms_before']} -> {job['ms_after']} ms ({stages})"
        )
    return lines
