"""examples/llama_apply.py at its smoke size on the CPU: the model from transformers runs with apply
off and on, logits agree, every routed operator is called and has a recorded choice, and the result
file makes a model page of the report."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from kernelarena.report.html import build_report
from kernelarena.report.html.model_run import load_model_run
from tests.report.synthetic import toy_trace_set

EXAMPLE = Path(__file__).parents[2] / "examples" / "llama_apply.py"


def test_llama_example_smoke(tmp_path: Path) -> None:
    pytest.importorskip("transformers")
    output = tmp_path / "llama.json"
    done = subprocess.run(
        [sys.executable, str(EXAMPLE), "--smoke", "--output", str(output),
         "--dataset", str(tmp_path / "shapes")],
        capture_output=True, text=True, timeout=300, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    result = json.loads(output.read_text())
    assert result["environment"]["transformers"] and result["environment"]["device"] == "cpu"
    assert set(result["timings"]) == {"apply off", "apply on"}
    assert all(t["median_ms"] > 0 for t in result["timings"].values())
    assert result["tokens_per_forward"] == 8
    assert result["max_abs_logit_difference"] < 0.05  # bfloat16 rounding, one order apart
    layers = result["model"]["num_hidden_layers"]
    calls = {c["definition"]: c["calls_per_forward"] for c in result["choices"]}
    assert calls == {
        "rmsnorm_bf16": 2 * layers + 1,  # two per layer and the final norm
        "gated_mlp_bf16": layers,
        "attention_prefill_bf16": layers,
    }
    # Nothing is measured on a CPU: apply runs each operator's default there.
    assert {c["reason"] for c in result["choices"]} == {"fallback"}
    # The shapes went into the dataset as traced workloads, ready for `kernelarena run`.
    assert len(list((tmp_path / "shapes" / "workloads").rglob("*.jsonl"))) == 3
    run = load_model_run(output)
    html = build_report(toy_trace_set(), [], model_runs=[run]).html
    assert 'id="model-0"' in html and "gated_mlp_bf16" in html
