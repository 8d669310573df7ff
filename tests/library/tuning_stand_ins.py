"""Stand-ins for the GPU in a library Triton solution's tuned path (library/_shared/tuning.py),
so the interpreter runs it: tuning on, one SM, every call large enough to tune, a fresh set of
tuners and ``bench`` in place of Triton's timers."""

from __future__ import annotations

import sys
from typing import Any

import pytest


def stand_in_tuning(monkeypatch: pytest.MonkeyPatch, module: dict[str, Any], bench: Any) -> Any:
    """``module``: the solution module's globals (its ``_PLANS`` names the shared plan module).
    Returns its tuners."""
    plans = module["_PLANS"]
    plan_module = sys.modules[type(plans).__module__]
    tuning = plan_module.tuning
    monkeypatch.setattr(tuning, "tunes", lambda x: True)
    monkeypatch.setattr(tuning, "multiprocessors", lambda index: 1)
    monkeypatch.setattr(tuning, "bench_cold", bench)
    monkeypatch.setattr(tuning, "bench_warm", bench)
    monkeypatch.setattr(plan_module, "TUNE_MIN_ELEMENTS", 0)
    monkeypatch.setattr(plans.tuners, "made", {})
    return plans.tuners
