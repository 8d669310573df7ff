"""Generated inputs meet the value constraints: offsets rise from 0 to their total, indices stay inside
their caches; inputs that cannot meet one (or loaded ones that break one) say which constraint."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from safetensors.torch import save_file

from kernelarena.data import (
    AxisConst,
    AxisVar,
    Definition,
    RandomInput,
    SafetensorsInput,
    TensorSpec,
    TraceSet,
    Workload,
)
from kernelarena.evaluate.inputs import InputsError, generate_inputs, random_tensor

CPU = torch.device("cpu")


def _paged_decode(constraints: list[str], reference: str | None = None) -> Definition:
    """FlashInfer's paged decode inputs, page size 16, with the given constraints."""
    return Definition(
        name="paged_decode",
        op_type="gqa_paged",
        axes={
            "batch_size": AxisVar(),
            "len_indptr": AxisVar(),
            "num_kv_indices": AxisVar(),
            "num_pages": AxisVar(),
            "page_size": AxisConst(value=16),
        },
        inputs={
            "q": TensorSpec(shape=["batch_size", "page_size"], dtype="bfloat16"),
            "k_cache": TensorSpec(shape=["num_pages", "page_size"], dtype="bfloat16"),
            "kv_indptr": TensorSpec(shape=["len_indptr"], dtype="int32"),
            "kv_indices": TensorSpec(shape=["num_kv_indices"], dtype="int32"),
            "kv_last_page_len": TensorSpec(shape=["batch_size"], dtype="int32"),
        },
        outputs={"out": TensorSpec(shape=["batch_size", "page_size"], dtype="bfloat16")},
        reference=reference
        or "def run(q, k_cache, kv_indptr, kv_indices, kv_last_page_len):\n    return q\n",
        constraints=constraints,
    )


INPUTS = ("q", "k_cache", "kv_indptr", "kv_indices", "kv_last_page_len")
PUBLISHED = ["len_indptr == batch_size + 1", "num_kv_indices == kv_indptr[-1].item()"]


def _workload(batch: int, indices: int, pages: int, **inputs: object) -> Workload:
    return Workload(
        uuid=f"b{batch}-i{indices}-p{pages}",
        axes={
            "batch_size": batch,
            "len_indptr": batch + 1,
            "num_kv_indices": indices,
            "num_pages": pages,
        },
        inputs={name: RandomInput() for name in INPUTS} | inputs,
    )


def _generate(definition: Definition, workload: Workload, seed: int = 0, **kwargs: object) -> dict:
    axes = definition.resolve_axes(workload.axes)
    return generate_inputs(definition, workload, axes, CPU, seed, None, **kwargs)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("batch", "indices", "pages"), [(1, 1, 1), (5, 23, 37), (7, 4, 9), (3, 0, 2)]
)
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_indptr_rises_to_its_total_and_page_ids_index_the_cache(
    batch: int, indices: int, pages: int, seed: int
) -> None:
    inputs = _generate(_paged_decode(PUBLISHED), _workload(batch, indices, pages), seed)
    indptr, page_ids, last = inputs["kv_indptr"], inputs["kv_indices"], inputs["kv_last_page_len"]
    assert indptr.dtype == torch.int32 and page_ids.dtype == torch.int32
    assert indptr[0] == 0 and indptr[-1] == indices and len(indptr) == batch + 1
    steps = indptr[1:] - indptr[:-1]
    assert (steps >= 0).all()
    if indices >= batch:  # every sequence gets a page when there are enough
        assert (steps >= 1).all()
    assert ((page_ids >= 0) & (page_ids < pages)).all()
    if indices <= pages:  # a page belongs to one sequence, as in a real cache
        assert len(set(page_ids.tolist())) == indices
    assert ((last >= 1) & (last <= 16)).all()


def test_explicit_bounds_are_met_inclusive_and_exclusive() -> None:
    definition = _paged_decode(
        [*PUBLISHED, "(kv_indices >= 2).all()", "kv_indices.max().item() <= 4"]
    )
    page_ids = _generate(definition, _workload(3, 500, 9))["kv_indices"]
    assert set(page_ids.tolist()) == {2, 3, 4}


def test_plain_definitions_draw_what_they_always_drew() -> None:
    definition = _paged_decode([])
    workload = _workload(2, 3, 4)
    inputs = _generate(definition, workload, seed=11)
    generator = torch.Generator().manual_seed(11)
    axes = definition.resolve_axes(workload.axes)
    for name, spec in definition.inputs.items():
        shape = definition.shape_of(spec, axes)
        assert shape is not None
        expected = random_tensor(spec, shape, generator, CPU)
        if name in ("kv_indices", "kv_last_page_len"):
            # FlashInfer's conventions for these names: drawn in range, after everything else
            assert not torch.equal(inputs[name], expected), name
            continue
        assert torch.equal(inputs[name], expected), name


def test_an_offsets_array_too_short_for_its_total_names_the_constraint() -> None:
    definition = _paged_decode(["num_kv_indices == kv_indptr[-1].item()"])
    workload = Workload(
        uuid="short",
        axes={"batch_size": 0, "len_indptr": 1, "num_kv_indices": 5, "num_pages": 3},
        inputs={},
    )
    with pytest.raises(InputsError, match=r"'num_kv_indices == kv_indptr\[-1\].item\(\)' needs"):
        _generate(definition, workload)


def test_an_empty_bound_names_its_source() -> None:
    definition = _paged_decode(
        [*PUBLISHED, "(kv_indices >= 0).all() and (kv_indices < num_pages - 5).all()"]
    )
    with pytest.raises(InputsError, match=r"\[0, -2\), which is empty .*num_pages - 5"):
        _generate(definition, _workload(2, 3, 3))


def test_a_constraint_of_no_generated_form_is_named_and_reported_at_validation() -> None:
    odd = "(kv_last_page_len % 2 == 1).all()"
    definition = _paged_decode([*PUBLISHED, odd])
    workload = _workload(40, 60, 80)
    with pytest.raises(
        InputsError, match=r"cannot generate inputs .*'\(kv_last_page_len % 2 == 1\)"
    ):
        _generate(definition, workload)
    # At validation it is only a problem for inputs drawn plainly at random: kv_last_page_len here
    # is drawn by FlashInfer's convention, which the check on the inputs judges.
    assert TraceSet().workload_problems(definition, workload) == []
    plain = Definition.model_validate(
        definition.to_json_dict()
        | {
            "inputs": definition.to_json_dict()["inputs"]
            | {"flags": {"shape": ["batch_size"], "dtype": "int32"}},
            "constraints": [*PUBLISHED, "(flags % 2 == 1).all()"],
            "reference": "def run(q, k_cache, kv_indptr, kv_indices, kv_last_page_len, flags):\n"
            "    return q\n",
        }
    )
    with_flags = workload.model_copy(update={"inputs": workload.inputs | {"flags": RandomInput()}})
    assert TraceSet().workload_problems(plain, with_flags) == [
        (
            "workload.inputs.flags",
            "random, but constraint '(flags % 2 == 1).all()' reads its values in a form the "
            "input generator cannot meet: give it as safetensors, or define make_inputs in the "
            "reference",
        )
    ]


def test_make_inputs_may_meet_what_the_generator_cannot_but_is_checked() -> None:
    odd = "(kv_last_page_len % 2 == 1).all()"
    maker = (
        "def make_inputs(axes, inputs, params, generator, device):\n"
        "    inputs['kv_last_page_len'] = inputs['kv_last_page_len'] * 0 + params['last']\n"
        "    return inputs\n"
    )
    reference = (
        "def run(q, k_cache, kv_indptr, kv_indices, kv_last_page_len):\n    return q\n\n" + maker
    )
    definition = _paged_decode([*PUBLISHED, odd], reference)
    namespace: dict[str, object] = {}
    exec(maker, namespace)
    workload = _workload(4, 6, 8)
    axes = definition.resolve_axes(workload.axes)
    for last, holds in ((3, True), (4, False)):
        odd_workload = workload.model_copy(update={"params": {"last": last}})
        if holds:
            inputs = generate_inputs(
                definition, odd_workload, axes, CPU, 0, namespace["make_inputs"]
            )  # type: ignore[arg-type]
            assert (inputs["kv_last_page_len"] == 3).all()
        else:
            with pytest.raises(InputsError, match="then make_inputs"):
                generate_inputs(definition, odd_workload, axes, CPU, 0, namespace["make_inputs"])  # type: ignore[arg-type]
    assert TraceSet().workload_problems(definition, workload) == []


def test_loaded_inputs_that_break_a_constraint_say_where_they_came_from(tmp_path: Path) -> None:
    save_file(
        {"indptr": torch.tensor([0, 2, 5], dtype=torch.int32)}, str(tmp_path / "w.safetensors")
    )
    definition = _paged_decode(PUBLISHED)
    blob = SafetensorsInput(path="w.safetensors", tensor_key="indptr")
    for indices, holds in ((5, True), (6, False)):
        workload = _workload(2, indices, 8, kv_indptr=blob)
        if holds:
            inputs = _generate(definition, workload, blob_root=tmp_path)
            assert inputs["kv_indptr"].tolist() == [0, 2, 5]
            continue
        with pytest.raises(InputsError) as raised:
            _generate(definition, workload, blob_root=tmp_path)
        message = str(raised.value)
        assert "break constraint 'num_kv_indices == kv_indptr[-1].item()'" in message
        assert "kv_indptr of shape (3,) = [0, 2, 5] (safetensors 'w.safetensors')" in message
        assert "num_kv_indices = 6" in message
