"""A dataset written the way FlashInfer-Bench 0.1.2 writes one (unset fields omitted), with a blob and
fields kernelarena does not know, for round-trip tests."""

from __future__ import annotations

import json
from pathlib import Path

import torch
from safetensors.torch import save_file

REFERENCE = """import torch


def run(hidden_states, weight, eps):
    x = hidden_states.to(torch.float32)
    rstd = torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps)
    return (x * rstd * weight.to(torch.float32)).to(hidden_states.dtype)
"""

DEFINITION = {
    "name": "rmsnorm_h128",
    "op_type": "rmsnorm",
    "description": "RMSNorm with hidden size 128",
    "tags": ["status:verified", "model:toy"],
    "axes": {"batch_size": {}, "hidden_size": {"value": 128, "description": "hidden"}},
    "inputs": {
        "hidden_states": {"shape": ["batch_size", "hidden_size"], "dtype": "bfloat16"},
        "weight": {"shape": ["hidden_size"], "dtype": "bfloat16"},
        "eps": {"shape": None, "dtype": "float32"},
    },
    "outputs": {"output": {"shape": ["batch_size", "hidden_size"], "dtype": "bfloat16"}},
    "reference": REFERENCE,
    "constraints": ["batch_size >= 0"],
    "future_field": {"kept": True},
}

SOLUTION = {
    "name": "rmsnorm_h128_torch",
    "definition": "rmsnorm_h128",
    "author": "peer",
    "spec": {
        "language": "python",
        "target_hardware": ["cpu", "cuda"],
        "entry_point": "main.py::run",
    },
    "sources": [
        {"path": "main.py", "content": "def run(hidden_states, weight, eps, output):\n    pass\n"}
    ],
    "unknown_solution_field": [1, 2, 3],
}

WORKLOADS = [
    {
        "definition": "rmsnorm_h128",
        "workload": {
            "axes": {"batch_size": 7},
            "inputs": {
                "hidden_states": {"type": "random"},
                "weight": {"type": "random"},
                "eps": {"type": "scalar", "value": 1e-6},
            },
            "uuid": "w-random",
        },
        "solution": None,
        "evaluation": None,
    },
    {
        "definition": "rmsnorm_h128",
        "workload": {
            "axes": {"batch_size": 3},
            "inputs": {
                "hidden_states": {
                    "type": "safetensors",
                    "path": "blob/workloads/rmsnorm/rmsnorm_h128/w-blob.safetensors",
                    "tensor_key": "hidden_states",
                },
                "weight": {"type": "random"},
                "eps": {"type": "scalar", "value": 1e-5},
            },
            "uuid": "w-blob",
        },
        "solution": None,
        "evaluation": None,
    },
]

TRACES = [
    {
        "definition": "rmsnorm_h128",
        "workload": WORKLOADS[0]["workload"],
        "solution": "rmsnorm_h128_torch",
        "evaluation": {
            "status": "PASSED",
            "environment": {"hardware": "NVIDIA H200", "libs": {"torch": "2.9.0"}},
            "timestamp": "2026-11-22T00:00:00",
            "log": "",
            "correctness": {"max_relative_error": 1e-3, "max_absolute_error": 2e-3, "extra": None},
            "performance": {
                "latency_ms": 0.01,
                "reference_latency_ms": 0.05,
                "speedup_factor": 5.0,
            },
        },
    },
    {
        "definition": "rmsnorm_h128",
        "workload": WORKLOADS[1]["workload"],
        "solution": "rmsnorm_h128_torch",
        "evaluation": {
            "status": "RUNTIME_ERROR",
            "environment": {"hardware": "NVIDIA H200", "libs": {}},
            "timestamp": "2026-11-22T00:00:01",
            "log": "boom",
            "correctness": None,
            "performance": None,
        },
    },
]


def write(root: Path) -> Path:
    (root / "definitions" / "rmsnorm").mkdir(parents=True)
    (root / "definitions" / "rmsnorm" / "rmsnorm_h128.json").write_text(
        json.dumps(DEFINITION, indent=2)
    )
    solutions = root / "solutions" / "rmsnorm" / "rmsnorm_h128"
    solutions.mkdir(parents=True)
    (solutions / "rmsnorm_h128_torch.json").write_text(json.dumps(SOLUTION, indent=2))
    (root / "workloads" / "rmsnorm").mkdir(parents=True)
    (root / "workloads" / "rmsnorm" / "rmsnorm_h128.jsonl").write_text(
        "".join(json.dumps(w) + "\n" for w in WORKLOADS)
    )
    (root / "traces" / "rmsnorm").mkdir(parents=True)
    (root / "traces" / "rmsnorm" / "rmsnorm_h128.jsonl").write_text(
        "".join(json.dumps(t) + "\n" for t in TRACES)
    )
    blob = root / "blob" / "workloads" / "rmsnorm" / "rmsnorm_h128" / "w-blob.safetensors"
    blob.parent.mkdir(parents=True)
    save_file({"hidden_states": torch.randn(3, 128).to(torch.bfloat16)}, str(blob))
    return root
