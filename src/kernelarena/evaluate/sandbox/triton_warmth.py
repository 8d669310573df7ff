"""Triton's start-up paid ahead in a sandbox: its import and its compile-cache key, which the
first call of every Triton kernel waits for (``sandbox``)."""

from __future__ import annotations

import contextlib
from typing import Any


def may_use_triton(solution_json: dict[str, Any]) -> bool:
    """Whether a solution (as the build request carries it) may launch Triton kernels: written in
    Triton, or naming Triton, torch.compile (Inductor writes Triton) or Liger in its sources or
    dependencies. A miss costs only the warm-up's head start: the first call computes the key."""
    spec = solution_json.get("spec") or {}
    if str(spec.get("language", "")).lower() == "triton":
        return True
    words = ("triton", "compile", "liger")
    texts = [str(d) for d in spec.get("dependencies") or []]
    texts += [str(f.get("content", "")) for f in solution_json.get("sources") or []]
    return any(word in text.lower() for text in texts for word in words)


def warm_triton() -> None:
    """Triton's import (0.1-0.3 s) and its compile-cache key (a hash of its sources and libraries,
    cached per process: 0.4-0.6 s on an H100 host), which the first call of every Triton kernel
    waits for, warm cache or cold. Most solutions are Triton's: a sandbox forked from a zygote
    inherits both from it (``zygote.main``, once a judge); one started as a program does both
    before it says it is ready. A judge's first sandboxes, which the run's first job waits for
    (started as programs, or forked before the zygote computed the key), do it beside that job's
    build and checks (not its timings), and only for a solution that may use Triton
    (``may_use_triton``). Best effort: a failure resurfaces where Triton is really
    used."""
    with contextlib.suppress(Exception):
        from triton.runtime.cache import triton_key

        triton_key()
