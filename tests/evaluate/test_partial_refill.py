"""``SetMaker.refill_some``: a few elements of each random floating-point input changed, drawn
for those elements alone (no whole set drawn to change two), the judge's copy changed alike and
the kept draw it came from left as it was; a blob input is left as the workload gives it."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest
import torch

from kernelarena.data import SafetensorsInput
from kernelarena.evaluate.judge.shared_sets import PARTIAL_REFILL_ELEMENTS, SetMaker, SharedSet
from kernelarena.library import load_library


def _set_maker(workload: Any) -> tuple[SetMaker, SharedSet, dict[str, Any]]:
    library = load_library()
    definition = library.definitions["rmsnorm_bf16"]
    axes = {"rows": 33, "hidden": 256}
    job = SimpleNamespace(
        definition=definition,
        workload=workload,
        axes=axes,
        reference=SimpleNamespace(shapes_inputs=False),
    )
    sets = SetMaker.__new__(SetMaker)
    sets.job, sets.device = job, torch.device("cpu")  # type: ignore[assignment]

    def no_whole_draw(*args: Any, **kwargs: Any) -> None:
        raise AssertionError("a whole set drawn to change a few elements")

    sets.draw = no_whole_draw  # type: ignore[method-assign]
    torch.manual_seed(0)
    kept = {
        "x": torch.randn(33, 256).bfloat16(),
        "weight": torch.randn(256).bfloat16(),
        "eps": 1e-6,
    }
    inputs = {n: v.clone() if isinstance(v, torch.Tensor) else v for n, v in kept.items()}
    outputs = {"out": torch.zeros(33, 256, dtype=torch.bfloat16)}
    shared = SharedSet(1, 7, inputs, outputs, private=dict(kept))
    return sets, shared, kept


def test_a_few_elements_change_in_the_set_and_in_the_judges_copy() -> None:
    workload = load_library().workloads["rmsnorm_bf16"][0]
    sets, shared, kept = _set_maker(workload)
    originals = {n: v.clone() for n, v in kept.items() if isinstance(v, torch.Tensor)}
    sets.refill_some(shared, seed=1234)
    assert shared.private is not None
    for name, original in originals.items():
        target = shared.inputs[name]
        assert isinstance(target, torch.Tensor)
        changed = int((target != original).sum())
        assert 1 <= changed <= PARTIAL_REFILL_ELEMENTS, (name, changed)
        assert torch.equal(shared.private[name], target)  # the judge's copy holds the same
        assert torch.equal(kept[name], original)  # the kept draw is another's too: unchanged
    assert shared.inputs["eps"] == 1e-6
    assert torch.isnan(shared.outputs["out"].float()).all()  # poisoned


def test_an_input_the_workload_loads_from_a_blob_is_left_alone(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    workload = load_library().workloads["rmsnorm_bf16"][0]
    blob = SafetensorsInput(type="safetensors", path="w.safetensors", tensor_key="weight")
    workload = workload.model_copy(update={"inputs": {**workload.inputs, "weight": blob}})
    sets, shared, kept = _set_maker(workload)
    weight = kept["weight"].clone()
    sets.refill_some(shared, seed=1234)
    assert torch.equal(shared.inputs["weight"], weight)
    assert int((shared.inputs["x"] != kept["x"]).sum()) >= 1
