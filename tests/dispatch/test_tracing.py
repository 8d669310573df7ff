"""Workload tracing: the tiny Llama's calls become deduplicated workloads of the user dataset."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

import torch

import kernelarena
from kernelarena.datasets import load_default
from kernelarena.evaluate.executors.runner import plan
from kernelarena.evaluate.inputs import generate_inputs, load_reference
from tests.dispatch.toys import toy_definition, toy_set

EXAMPLE = Path(__file__).parents[2] / "examples" / "tiny_llama.py"


def tiny_llama() -> ModuleType:
    if "tiny_llama" not in sys.modules:
        spec = importlib.util.spec_from_file_location("tiny_llama", EXAMPLE)
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        sys.modules["tiny_llama"] = module
        spec.loader.exec_module(module)
    return sys.modules["tiny_llama"]


def test_tiny_llama_shapes_are_recorded_once(tmp_path: Path) -> None:
    llama = tiny_llama()
    model = llama.build()
    dataset = tmp_path / "dataset"
    shapes = [(1, 8), (2, 8), (1, 8), (2, 4)]  # 8, 16, 8 and 8 tokens: two distinct row counts
    kernelarena.disable_apply()
    plain = llama.run_shapes(model, shapes)
    runtime = kernelarena.enable_apply(dataset, trace=True)
    traced = llama.run_shapes(model, shapes)
    for a, b in zip(traced, plain):  # the default CPU solutions agree with the bodies
        torch.testing.assert_close(a, b, atol=1e-5, rtol=1e-5)
    recorded = sorted((d, tuple(sorted(w.axes.items()))) for d, w in runtime.recorder.recorded)
    hidden, two_d = model.config.hidden, 2 * model.config.intermediate
    expected = sorted(
        [
            (f"{f}_fp32", (("hidden", hidden), ("rows", r)))
            for f in ("rmsnorm", "fused_add_rmsnorm")
            for r in (8, 16)
        ]
        + [
            ("silu_and_mul_fp32", (("d", two_d // 2), ("rows", r), ("two_d", two_d)))
            for r in (8, 16)
        ]
    )
    assert recorded == expected
    on_disk = (dataset / "workloads" / "norm" / "rmsnorm_fp32.jsonl").read_text().splitlines()
    assert len(on_disk) == 2
    again = kernelarena.enable_apply(dataset, trace=True)  # another process, the same model
    llama.run_shapes(model, shapes)
    assert again.recorder.recorded == []
    assert (
        len((dataset / "workloads" / "norm" / "rmsnorm_fp32.jsonl").read_text().splitlines()) == 2
    )
    combined, _ = load_default(dataset)
    assert not combined.problems
    traced_loads = combined.workloads_for("rmsnorm_fp32", ["traced"])
    assert sorted(w.axes["rows"] for w in traced_loads) == [8, 16]
    assert traced_loads[0].inputs["eps"].value == model.config.eps  # scalars kept as given
    jobs = plan(combined, ["rmsnorm_fp32"], ["torch_eager"], suite="all")
    assert {w.uuid for w in traced_loads} <= {job.workload.uuid for job in jobs}


def test_saved_tensors_are_deduplicated_by_content(tmp_path: Path) -> None:
    definition = toy_definition()
    dataset = tmp_path / "dataset"
    trace_set = toy_set(definition)
    trace_set.root = dataset

    @kernelarena.apply("toy")
    def toy(x: torch.Tensor, factor: float) -> torch.Tensor:
        return x * factor

    x = torch.randn(3, 5)
    runtime = kernelarena.enable_apply(trace_set, trace_tensors=True)
    toy(x, 2.0)
    toy(x, 2.0)
    toy(x.clone(), 2.0)
    assert len(runtime.recorder.recorded) == 1  # one shape, one key: recorded on its first call
    rerun = kernelarena.enable_apply(trace_set, trace_tensors=True)
    toy(x.clone(), 2.0)  # a new process with the same tensors: nothing new
    toy(torch.randn(3, 5), 2.0)  # same shape, other values: but the key is known in this run
    assert rerun.recorder.recorded == []
    third = kernelarena.enable_apply(trace_set, trace_tensors=True)
    toy(torch.ones(3, 5), 2.0)
    assert len(third.recorder.recorded) == 1
    _, first = runtime.recorder.recorded[0]
    inputs = generate_inputs(
        definition,
        first,
        {"rows": 3, "cols": 5},
        torch.device("cpu"),
        0,
        load_reference(definition).get("make_inputs"),
        dataset,
    )
    assert torch.equal(inputs["x"], x) and inputs["factor"] == 2.0
