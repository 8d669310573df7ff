"""scripts/ship_traces.py: a GPU run's traces merged into the shipped ones, slot by slot."""

from __future__ import annotations

import importlib.util
import json
import shutil
from pathlib import Path
from typing import Any

from kernelarena.library import SHIPPED_TRACES

_SPEC = importlib.util.spec_from_file_location(
    "ship_traces", Path(__file__).resolve().parents[2] / "scripts" / "ship_traces.py"
)
assert _SPEC is not None and _SPEC.loader is not None
ship_traces = importlib.util.module_from_spec(_SPEC)
_SPEC.loader.exec_module(ship_traces)

FILE = Path("norm") / "rmsnorm_bf16.jsonl"
H100 = "NVIDIA H1000 Made-Up"  # hardware no shipped trace comes from


def _lines(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def _write(path: Path, traces: list[dict[str, Any]]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(t) + "\n" for t in traces))


def test_new_traces_replace_their_slot_and_leave_the_rest(tmp_path: Path) -> None:
    shipped = tmp_path / "shipped"
    shutil.copytree(SHIPPED_TRACES, shipped)
    before = _lines(shipped / FILE)
    remeasured = dict(before[0])  # same hardware, solution and workload: replaces its line
    remeasured["evaluation"] = dict(before[0]["evaluation"], timestamp="2026-11-25T00:00:00+00:00")
    on_h100 = json.loads(json.dumps(before[1]))
    on_h100["evaluation"]["environment"]["hardware"] = H100
    failed = json.loads(json.dumps(before[2]))
    failed["evaluation"]["environment"]["hardware"] = H100
    failed["evaluation"].update(status="RUNTIME_ERROR", correctness=None, performance=None)
    _write(tmp_path / "dataset" / "traces" / FILE, [remeasured, on_h100, failed])

    counts = ship_traces.merge(tmp_path / "dataset", shipped)

    after = _lines(shipped / FILE)
    assert counts == {str(FILE): 2}
    assert len(after) == len(before) + 1  # one replaced, one added, the failure not shipped
    assert after[-2:] == [remeasured, on_h100]
    assert before[0] not in after and before[1:] == after[: len(before) - 1]
