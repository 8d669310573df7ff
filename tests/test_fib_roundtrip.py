"""Round trips through flashinfer-bench 0.1.2: what it writes (constraints over tensor values, a torch
binding, safetensors inputs, traces), kernelarena reads and runs, and writes back so that it reads the
same; and what kernelarena writes (our fib_shapes definitions) it reads and writes back to us."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from kernelarena.compile import DependencyMissing, build_solution, builder_for
from kernelarena.compile.torch_extension import TorchExtensionBuilder
from kernelarena.data import Status, TraceSet
from kernelarena.evaluate.executors.benchmark import Benchmark
from kernelarena.evaluate.inputs import generate_inputs
from kernelarena.evaluate.options import Options
from tests.data import fib_shapes

fib = pytest.importorskip("flashinfer_bench.data")

NAME = fib_shapes.PAGED_DECODE
OP_TYPE = "gqa_paged"


def _their_definition() -> object:
    """The paged decode, made with flashinfer-bench's own classes (so without our tolerances)."""
    payload = fib_shapes.definition(NAME).to_json_dict()
    payload.pop("tolerances")
    return fib.Definition.model_validate(payload)


def _their_solution() -> object:
    ours = fib_shapes.cuda_solution(NAME)
    return fib.Solution(
        name=ours.name,
        definition=NAME,
        author="flashinfer-bench round trip",
        spec=fib.BuildSpec(
            language=fib.SupportedLanguages.CUDA,
            target_hardware=["H100"],
            entry_point="main.cpp::run",
            binding=fib.SupportedBindings.TORCH,
        ),
        sources=[fib.SourceFile(path=s.path, content=s.content) for s in ours.sources],
    )


def _their_dataset(root: Path) -> dict[str, object]:
    """Written by flashinfer-bench: a definition, a torch-binding solution, a workload of random
    inputs, one whose kv_indptr and kv_indices are a safetensors blob, and a trace."""
    theirs = fib.TraceSet(root=root)
    definition = _their_definition()
    theirs.definitions[NAME] = definition
    fib.save_json_file(definition, root / "definitions" / OP_TYPE / f"{NAME}.json")
    solution = _their_solution()
    fib.save_json_file(solution, root / "solutions" / OP_TYPE / NAME / f"{solution.name}.json")
    blob = theirs.add_workload_blob_tensor(
        NAME,
        "w-blob",
        {
            "kv_indptr": torch.tensor([0, 3, 3, 9], dtype=torch.int32),
            "kv_indices": torch.tensor([4, 0, 2, 8, 7, 1, 5, 3, 6], dtype=torch.int32),
        },
    )
    random_inputs = {n: fib.RandomInput() for n in fib_shapes.definition(NAME).inputs}
    random_inputs["sm_scale"] = fib.ScalarInput(value=0.125)
    axes = {"batch_size": 3, "len_indptr": 4, "num_kv_indices": 9, "num_pages": 11}
    workloads = [
        fib.Workload(uuid="w-random", axes=axes, inputs=random_inputs),
        fib.Workload(
            uuid="w-blob",
            axes=axes,
            inputs=random_inputs
            | {
                n: fib.SafetensorsInput(path=blob, tensor_key=n)
                for n in ("kv_indptr", "kv_indices")
            },
        ),
    ]
    lines = [fib.Trace(definition=NAME, workload=w) for w in workloads]
    fib.save_jsonl_file(lines, root / "workloads" / OP_TYPE / f"{NAME}.jsonl")
    evaluation = fib.Evaluation(
        status=fib.EvaluationStatus.PASSED,
        environment=fib.Environment(hardware="NVIDIA H100 80GB HBM3", libs={"torch": "2.11.0"}),
        timestamp="2026-11-24T12:00:00",
        correctness=fib.Correctness(max_relative_error=1e-3, max_absolute_error=4e-3),
        performance=fib.Performance(
            latency_ms=0.01, reference_latency_ms=2.0, speedup_factor=200.0
        ),
    )
    trace = fib.Trace(
        definition=NAME, workload=workloads[0], solution=solution.name, evaluation=evaluation
    )
    fib.save_jsonl_file([trace], root / "traces" / OP_TYPE / f"{NAME}.jsonl")
    return {"definition": definition, "solution": solution, "workloads": workloads, "trace": trace}


def _dump(model: object) -> object:
    """Every field's value, defaults included: we always write ``type``, which they leave unset."""
    return json.loads(model.model_dump_json())  # type: ignore[attr-defined]


def test_what_flashinfer_bench_writes_kernelarena_reads_and_writes_back(
    tmp_path: Path,
) -> None:
    written = _their_dataset(tmp_path / "theirs")
    ours = TraceSet.load(tmp_path / "theirs", strict=True)
    definition = ours.definitions[NAME]
    assert "num_kv_indices == kv_indptr[-1].item()" in definition.value_plan.checks
    assert "k_cache.shape[1] == page_size" in definition.static_constraints
    solution = ours.solutions[written["solution"].name]  # type: ignore[attr-defined]
    assert solution.spec.binding == "torch"
    assert isinstance(builder_for(solution), TorchExtensionBuilder)
    if torch.version.cuda is None:
        with pytest.raises(DependencyMissing, match="needs a CUDA build of torch"):
            build_solution(definition, solution, "cpu")
    by_uuid = {w.uuid: w for w in ours.workloads_for(NAME)}
    blob_inputs = generate_inputs(
        definition,
        by_uuid["w-blob"],
        definition.resolve_axes(by_uuid["w-blob"].axes),
        torch.device("cpu"),
        0,
        None,
        ours.blob_root(by_uuid["w-blob"]),
    )
    assert blob_inputs["kv_indptr"].tolist() == [
        0,
        3,
        3,
        9,
    ]  # as written, and it meets the constraints
    random_inputs = generate_inputs(
        definition,
        by_uuid["w-random"],
        definition.resolve_axes(by_uuid["w-random"].axes),
        torch.device("cpu"),
        0,
        None,
    )
    assert random_inputs["kv_indptr"][-1] == 9 and int(random_inputs["kv_indices"].max()) < 11

    ours.save(tmp_path / "ours")
    again = fib.TraceSet.from_path(str(tmp_path / "ours"))
    assert _dump(again.definitions[NAME]) == _dump(written["definition"])
    assert _dump(again.solutions[NAME][0]) == _dump(written["solution"])
    assert [_dump(t.workload) for t in again.workloads[NAME]] == [
        _dump(w)
        for w in written["workloads"]  # type: ignore[attr-defined]
    ]
    assert _dump(again.traces[NAME][0]) == _dump(written["trace"])
    path = written["workloads"][1].inputs["kv_indptr"].path  # type: ignore[index]
    assert torch.equal(
        again.get_workload_blob_tensor(path)["kv_indptr"],
        torch.tensor([0, 3, 3, 9], dtype=torch.int32),
    )


def test_what_kernelarena_writes_flashinfer_bench_reads_and_writes_back(tmp_path: Path) -> None:
    ours = fib_shapes.trace_set(tmp_path / "ours")
    theirs = fib.TraceSet.from_path(str(tmp_path / "ours"))
    assert set(theirs.definitions) == set(fib_shapes.NAMES)
    bindings = {s.name: s.spec.binding for ss in theirs.solutions.values() for s in ss}
    assert bindings == {
        s.name: (fib.SupportedBindings.TORCH if s.spec.binding else None)
        for s in ours.solutions.values()
    }
    back = tmp_path / "back"
    for name, definition in theirs.definitions.items():
        fib.save_json_file(definition, back / "definitions" / definition.op_type / f"{name}.json")
        for solution in theirs.solutions[name]:
            fib.save_json_file(
                solution, back / "solutions" / definition.op_type / name / f"{solution.name}.json"
            )
        fib.save_jsonl_file(
            theirs.workloads[name], back / "workloads" / definition.op_type / f"{name}.jsonl"
        )
    reread = TraceSet.load(back, strict=True)
    for name, definition in ours.definitions.items():
        # flashinfer-bench keeps its own fields and drops our optional ones (tolerances, workload
        # tags), by design: nothing else may differ.
        expected = {k: v for k, v in definition.to_json_dict().items() if k != "tolerances"}
        assert reread.definitions[name].to_json_dict() == expected
        assert [w.to_json_dict() for w in reread.workloads[name]] == [
            {k: v for k, v in w.to_json_dict().items() if k != "tags"} for w in ours.workloads[name]
        ]
    for name, solution in ours.solutions.items():
        assert reread.solutions[name].sources == solution.sources
        assert reread.solutions[name].spec.binding == solution.spec.binding


@pytest.mark.gpu
@pytest.mark.timeout(1200)
def test_what_flashinfer_bench_writes_runs_on_the_gpu(tmp_path: Path) -> None:
    """Their torch-binding solution, on their random and safetensors workloads: both pass."""
    written = _their_dataset(tmp_path / "theirs")
    ours = TraceSet.load(tmp_path / "theirs", strict=True)
    ours.traces.clear()  # the run appends its own
    options = Options(trials=2, budget_ms=20, max_iterations=20)
    traces = Benchmark(ours, devices="cuda:0", options=options).run_all(suite="all")
    statuses = {t.workload.uuid: t.evaluation.status for t in traces if t.evaluation}
    assert statuses == {"w-random": Status.PASSED, "w-blob": Status.PASSED}, [
        t.evaluation.log for t in traces if t.evaluation
    ]
    assert {t.solution for t in traces} == {written["solution"].name}  # type: ignore[attr-defined]
