"""cProfile for a benchmark's run: the parent and every judge, written to one folder, each with a
text summary beside it, so that one call on a GPU machine brings back where the time went.

The judges profile themselves when ``KERNELARENA_WORKER_PROFILE`` names a folder as they start
(``evaluate/judge/worker.py``: ``worker-<pid>.prof``, written when they stop); the parent's profile is
``parent.prof``. Read a summary with any pager, or a profile with ``python -m pstats FILE``.
"""

from __future__ import annotations

import contextlib
import cProfile
import io
import os
import pstats
from collections.abc import Iterator
from pathlib import Path

WORKER_PROFILE = "KERNELARENA_WORKER_PROFILE"
SUMMARY_ROWS = 45


@contextlib.contextmanager
def workers_profiled(folder: Path | None) -> Iterator[None]:
    """Judges started inside profile themselves into ``folder`` (nothing without a folder)."""
    if folder is None:
        yield
        return
    folder.mkdir(parents=True, exist_ok=True)
    previous = os.environ.get(WORKER_PROFILE)
    os.environ[WORKER_PROFILE] = str(folder)
    try:
        yield
    finally:
        if previous is None:
            os.environ.pop(WORKER_PROFILE, None)
        else:
            os.environ[WORKER_PROFILE] = previous


@contextlib.contextmanager
def parent_profiled(folder: Path | None, name: str = "parent") -> Iterator[None]:
    """This process under cProfile inside, written to ``folder/<name>.prof``."""
    if folder is None:
        yield
        return
    folder.mkdir(parents=True, exist_ok=True)
    profiler = cProfile.Profile()
    profiler.enable()
    try:
        yield
    finally:
        profiler.disable()
        profiler.dump_stats(str(folder / f"{name}.prof"))


def summarize(folder: Path) -> list[Path]:
    """A ``.txt`` beside each ``.prof`` of ``folder``: the functions with the most cumulative
    time, then the most time of their own."""
    written = []
    for profile in sorted(folder.glob("*.prof")):
        text = io.StringIO()
        stats = pstats.Stats(str(profile), stream=text)
        stats.strip_dirs()
        text.write(f"{profile.name}: by cumulative time\n")
        stats.sort_stats("cumulative").print_stats(SUMMARY_ROWS)
        text.write(f"\n{profile.name}: by own time\n")
        stats.sort_stats("tottime").print_stats(SUMMARY_ROWS)
        summary = profile.with_suffix(".txt")
        summary.write_text(text.getvalue())
        written.append(summary)
    return written
