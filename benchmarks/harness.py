"""Shared benchmark harness: providers side by side, ceilings from the same run, JSON results.

A benchmark script builds ``Case`` objects (a label, the bytes and FLOPs it moves and does, counted
explicitly) and, per case, a dict of provider name to a callable ``fn(i)`` that runs one call on
input set ``i`` (rotate when the data fits in L2). ``run`` times every provider with the same
timer: CUDA events with the L2 flushed between calls and a spin kernel queued before each call (so
the events time its GPU work, not a slow host launch; the providers interleaved in passes), or,
for cases shorter than ``graph_below_us``, CUDA graph replays. Results go to
``benchmarks/results/<name>_<gpu>_<date>.json`` with the device, library versions, date, every
sample and the ceilings.
"""

from __future__ import annotations

import datetime as _dt
import json
import os
import platform
import re
import subprocess
import sys
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any

import torch

from kernelarena.compile.cache import sandbox_cache
from kernelarena.evaluate.judge.ceilings import measure_ceilings
from kernelarena.evaluate.sandbox.graph_timing import time_cuda_graph
from kernelarena.evaluate.sandbox.solution_caches import LIBRARY_NAMESPACE
from kernelarena.evaluate.sandbox.timing import Timing, summarize, time_events_or_clock

RESULTS = Path(__file__).parent / "results"
EVENT_PASSES = 3

# The compiled peers' kernels come from the Inductor cache the engine's sandboxes use for the
# library's solutions (``evaluate.sandbox.solution_caches``: written by kernelarena's own code only), so a
# benchmark and ``kernelarena run`` on one machine time the same autotuned kernels: Inductor picks
# a reduction's launch config by timing each at its first call, and at 128x4096 separate caches
# gave the compiled rmsnorm and layernorm configs 13-23% apart in GPU time (H100 and H200,
# 2026-11-26) where every other provider agreed.
os.environ.setdefault("TORCHINDUCTOR_CACHE_DIR", str(sandbox_cache(LIBRARY_NAMESPACE) / "inductor"))


class Unsupported(Exception):
    """A provider that cannot run a case (missing package, unsupported shape); reported, not fatal."""


@dataclass
class Case:
    label: str
    params: dict[str, Any]
    bytes_moved: float | None = None
    flops: float | None = None
    # Calls in each timed CUDA graph: at least as many as the input sets a provider rotates over,
    # so that every set is read once per replay.
    graph_calls: int = 20


@dataclass
class Row:
    case: str
    provider: str
    params: dict[str, Any]
    status: str
    timing: Timing | None = None
    gbps: float | None = None
    tflops: float | None = None
    copy_fraction: float | None = None
    matmul_fraction: float | None = None
    note: str = ""
    extra: dict[str, Any] = field(default_factory=dict)


def sandbox_walls() -> str:
    """``namespaces`` where the engine's sandboxes are forked inside bwrap's walls, else why not:
    without them sandboxes start as programs, and an engine benchmark measures another engine."""
    from kernelarena.evaluate.sandbox.isolation import walls

    found = walls()
    return "namespaces" if found.available else found.why_not


def environment(device: torch.device) -> dict[str, Any]:
    info: dict[str, Any] = {
        "date": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
        "python": sys.version.split()[0],
        "platform": platform.platform(),
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
    }
    try:
        import triton

        info["triton"] = triton.__version__
    except ImportError:
        pass
    for package in ("liger_kernel", "tvm_ffi", "flashinfer"):
        try:
            module = __import__(package)
            info[package] = getattr(module, "__version__", "installed")
        except ImportError:
            continue
    if device.type == "cuda":
        props = torch.cuda.get_device_properties(device)
        info.update(
            device=props.name,
            multiprocessors=props.multi_processor_count,
            l2_bytes=getattr(props, "L2_cache_size", None),
            memory_bytes=props.total_memory,
            capability=f"{props.major}.{props.minor}",
        )
    else:
        info["device"] = platform.processor() or "cpu"
    return info


def kernelarena_git_rev(given: str | None = None) -> str:
    """The code measured: ``given``, else ``KERNELARENA_GIT_REV`` (the device's copy of the working
    tree may carry an older .git), else the checkout's HEAD, marked dirty where files changed."""
    rev = given or os.environ.get("KERNELARENA_GIT_REV")
    if rev:
        return rev
    repo = Path(__file__).resolve().parent.parent
    try:
        head = ["git", "-C", str(repo), "rev-parse", "--short=12", "HEAD"]
        rev = subprocess.run(head, capture_output=True, text=True, check=True).stdout.strip()
        status = ["git", "-C", str(repo), "status", "--porcelain", "--untracked-files=no"]
        changed = subprocess.run(status, capture_output=True, text=True, check=True).stdout
    except (OSError, subprocess.CalledProcessError):
        return "unknown"
    return rev + ("-dirty" if changed.strip() else "")


def toolchain() -> dict[str, str]:
    """nvcc's version line and nvidia-smi's view of the GPU (driver, top SM clock, power limit),
    where they run: what a probe's log needs beside ``environment``."""
    info: dict[str, str] = {}
    try:
        nvcc = Path(os.environ.get("CUDA_HOME", "/usr/local/cuda")) / "bin" / "nvcc"
        version = subprocess.run([str(nvcc), "--version"], capture_output=True, text=True)
        info["nvcc"] = version.stdout.strip().splitlines()[-1]
        query = "--query-gpu=name,driver_version,clocks.max.sm,power.limit"
        smi = subprocess.run(
            ["nvidia-smi", query, "--format=csv,noheader"], capture_output=True, text=True
        )
        info["nvidia_smi"] = smi.stdout.strip()
    except (OSError, IndexError):
        pass
    return info


def _time_interleaved(
    providers: dict[str, Callable[[int], Any]], device: torch.device
) -> dict[str, Timing | Exception]:
    """Each provider timed in ``EVENT_PASSES`` passes over all of them, each pass in an order
    rotated by one, its samples pooled: a GPU whose clock sags under sustained load (an H100 at
    its power limit on millisecond attention kernels) then slows every provider alike instead of
    whichever came last."""

    def one_pass(fn: Callable[[int], Any]) -> Timing:
        return time_events_or_clock(
            fn,
            device,
            warmup=3,
            max_iterations=60 // EVENT_PASSES,
            min_iterations=2,
            budget_ms=400 / EVENT_PASSES,
        )

    samples: dict[str, list[float]] = {name: [] for name in providers}
    modes: dict[str, str] = {}
    failed: dict[str, Exception] = {}
    names = list(providers)
    for index in range(EVENT_PASSES if names else 0):
        for name in names[index % len(names) :] + names[: index % len(names)]:
            if name in failed:
                continue
            timed = _guarded(partial(one_pass, providers[name]))
            if isinstance(timed, Exception):
                failed[name] = timed
            else:
                samples[name].extend(timed.samples_ms)
                modes[name] = timed.mode
    return {
        name: failed[name] if name in failed else summarize(samples[name], modes[name])
        for name in names
    }


def _guarded(timed: Callable[[], Timing]) -> Timing | Exception:
    try:
        return timed()
    except Exception as error:  # a failing provider is a row, not the end of the run
        return error


def run(
    name: str,
    cases: Iterable[tuple[Case, Callable[[], dict[str, Callable[[int], Any]]]]],
    *,
    device: torch.device | None = None,
    graph_below_us: float = 40.0,
    ceilings: dict[str, float] | None = None,
    write: bool = True,
) -> dict[str, Any]:
    """Time every provider of every case; ``cases`` yields (case, factory of provider callables)."""
    device = device or torch.device("cuda" if torch.cuda.is_available() else "cpu")
    ceilings = ceilings or measure_ceilings(device)
    rows: list[Row] = []
    for case, factory in cases:
        try:
            providers = factory()
        except Exception as error:  # a case that cannot be set up is a row, not the end of the run
            status = "skipped" if isinstance(error, Unsupported) else "error"
            rows.append(
                Row(
                    case.label,
                    "*",
                    case.params,
                    status,
                    note=f"{type(error).__name__}: {error}"[:300],
                )
            )
            continue
        timings = _time_interleaved(providers, device)
        measured = [t for t in timings.values() if isinstance(t, Timing)]
        if (
            device.type == "cuda"
            and measured
            and min(t.median_ms for t in measured) * 1e3 < graph_below_us
        ):
            for provider, fn in providers.items():
                if isinstance(timings[provider], Timing):
                    timings[provider] = _guarded(
                        partial(time_cuda_graph, fn, device, calls_per_graph=case.graph_calls)
                    )
        for provider, result in timings.items():
            rows.append(_row(case, provider, result, ceilings))
        del providers
        if device.type == "cuda":
            torch.cuda.empty_cache()
    report = {
        "benchmark": name,
        "environment": environment(device),
        "ceilings": ceilings,
        "rows": [_row_json(r) for r in rows],
    }
    if write:
        report["path"] = str(write_report(name, report))
    print_table(report)
    return report


def _row(case: Case, provider: str, result: Timing | Exception, ceilings: dict[str, float]) -> Row:
    if not isinstance(result, Timing):
        status = "skipped" if isinstance(result, Unsupported) else "error"
        return Row(
            case.label,
            provider,
            case.params,
            status,
            note=f"{type(result).__name__}: {result}"[:300],
        )
    seconds = result.median_ms * 1e-3
    row = Row(case.label, provider, case.params, "ok", timing=result)
    if case.bytes_moved:
        row.gbps = case.bytes_moved / seconds / 1e9
        row.copy_fraction = row.gbps / ceilings["copy_gbps"]
    if case.flops:
        row.tflops = case.flops / seconds / 1e12
        row.matmul_fraction = row.tflops / ceilings["matmul_tflops"]
    return row


def _row_json(row: Row) -> dict[str, Any]:
    data: dict[str, Any] = {
        "case": row.case,
        "provider": row.provider,
        "params": row.params,
        "status": row.status,
        "gbps": row.gbps,
        "tflops": row.tflops,
        "copy_fraction": row.copy_fraction,
        "matmul_fraction": row.matmul_fraction,
        "note": row.note,
    }
    if row.timing is not None:
        data.update(row.timing.as_dict())
    return data


def result_path(name: str, env: dict[str, Any]) -> Path:
    device = re.sub(r"[^A-Za-z0-9]+", "-", str(env.get("device", "cpu"))).strip("-").lower()
    return RESULTS / f"{name}_{device}_{env['date'][:10]}.json"


def write_report(name: str, report: dict[str, Any], label: str = "") -> Path:
    """``report`` as JSON at ``result_path`` (``_<label>`` before the suffix when given)."""
    path = result_path(name, report["environment"])
    if label:
        path = path.with_name(f"{path.stem}_{label}.json")
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(report, indent=1) + "\n")
    return path


def print_table(report: dict[str, Any]) -> None:
    from rich.console import Console
    from rich.table import Table

    ceilings = report["ceilings"]
    table = Table(
        title=f"{report['benchmark']} on {report['environment'].get('device')} "
        f"(copy {ceilings['copy_gbps']:.0f} GB/s, matmul {ceilings['matmul_tflops']:.0f} TFLOP/s)"
    )
    for column in (
        "case",
        "provider",
        "median us",
        "p20-p80 us",
        "GB/s",
        "TFLOP/s",
        "of ceiling",
        "mode",
    ):
        table.add_column(column, justify="right" if column not in ("case", "provider") else "left")
    for row in report["rows"]:
        if row["status"] != "ok":
            table.add_row(
                row["case"], row["provider"], row["status"], row["note"][:60], "", "", "", ""
            )
            continue
        fraction = (
            row["copy_fraction"] if row["copy_fraction"] is not None else row["matmul_fraction"]
        )
        table.add_row(
            row["case"],
            row["provider"],
            f"{row['median_ms'] * 1e3:.1f}",
            f"{row['p20_ms'] * 1e3:.1f}-{row['p80_ms'] * 1e3:.1f}",
            f"{row['gbps']:.0f}" if row["gbps"] is not None else "",
            f"{row['tflops']:.1f}" if row["tflops"] is not None else "",
            f"{fraction:.0%}" if fraction is not None else "",
            row["mode"],
        )
    Console(width=160).print(table)
