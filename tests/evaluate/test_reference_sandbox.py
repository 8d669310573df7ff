"""A definition's reference in its own sandbox gives what it gave in the judge, bit for bit: the
drawn inputs (``make_inputs`` included: strided rows, permuted layouts, FP4 codes and scales),
the expected outputs, the float64 run; and a result of another dtype or layout than the judge
expects reaches it unchanged (``reference_sandbox``: described, then delivered to measure)."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import torch

from kernelarena.data import AxisVar, Definition, RandomInput, TensorSpec, Workload
from kernelarena.evaluate.judge.crosscheck import EVENT_MODES
from kernelarena.evaluate.judge.reference_sandbox import SandboxedReference
from kernelarena.evaluate.judge.references import InJudgeReference, Reference
from kernelarena.evaluate.judge.shared_sets import CheckedJob
from kernelarena.evaluate.options import Options
from kernelarena.evaluate.sandbox.sandboxes import Sandboxes
from kernelarena.library import load_library

# Library definitions whose make_inputs shape their inputs, with the params that do it.
SHAPED = [
    ("rmsnorm_bf16", "row_stride"),
    ("attention_prefill_bf16", "layout"),
    ("attention_decode_bf16", "seq_lens"),
    ("fused_add_rmsnorm_inplace_fp32", "x_scale"),
    ("nvfp4_gemv", "generator"),
    ("scale_fp32", None),
]


@pytest.fixture(scope="module")
def sandboxes(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Sandboxes]:
    made = Sandboxes("cpu", tmp_path_factory.mktemp("sandboxes"), [])
    try:
        yield made
    finally:
        made.close()


def _job(definition: Definition, workload: Workload, reference: Reference) -> CheckedJob:
    axes = definition.resolve_axes(workload.axes)
    return CheckedJob(definition, workload, axes, reference, Options(), None, True)


def _workload(name: str, param: str | None) -> Workload:
    workloads = load_library().workloads[name]
    if param is None:
        return next(w for w in workloads if "smoke" in (w.tags or []))
    return next(w for w in workloads if param in (w.params or {}) and "large" not in w.tags)


def _same(left: object, right: object, what: str) -> None:
    if isinstance(left, torch.Tensor):
        assert isinstance(right, torch.Tensor), what
        assert (left.dtype, left.shape) == (right.dtype, right.shape), what
        bits = [t.contiguous().view(torch.uint8) for t in (left, right)]
        assert torch.equal(*bits), what
    else:
        assert left == right, what


@pytest.mark.timeout(600)
@pytest.mark.parametrize(("name", "param"), SHAPED)
def test_the_sandboxed_reference_gives_what_the_judge_computed(
    sandboxes: Sandboxes, name: str, param: str | None
) -> None:
    _compare(sandboxes, name, param, torch.device("cpu"))


@pytest.mark.gpu
@pytest.mark.timeout(600)
@pytest.mark.parametrize(("name", "param"), SHAPED)
def test_the_sandboxed_reference_gives_what_the_judge_computed_on_gpu(
    tmp_path: Path, name: str, param: str | None
) -> None:
    """The same on a GPU: the sandbox a spare, the arena CUDA memory passed by descriptor, the
    reference timed there (graphs and events)."""
    sandboxes = Sandboxes("cuda:0", tmp_path, [])
    try:
        there = _compare(sandboxes, name, param, torch.device("cuda:0"))
    finally:
        sandboxes.close()
    assert there.box is None


def _compare(
    sandboxes: Sandboxes, name: str, param: str | None, device: torch.device
) -> SandboxedReference:
    definition = load_library().definitions[name]
    workload = _workload(name, param)
    here = InJudgeReference(definition)
    there = SandboxedReference(definition, device, sandboxes)
    try:
        there.ready(60.0)
        assert there.shapes_inputs == here.shapes_inputs
        assert "Landlock" in there.confinement or "not confined" in there.confinement
        for seed, distribution in ((1, (1.0, 0.0)), (2, (0.125, 0.125)), (1, (1.0, 0.0))):
            drawn_here = here.draw(_job(definition, workload, here), device, seed, distribution)
            job = _job(definition, workload, there)
            drawn = there.draw(job, device, seed, distribution)
            assert list(drawn) == list(drawn_here)
            for key in drawn:
                _same(drawn[key], drawn_here[key], f"{name} input {key}")
                if isinstance(drawn[key], torch.Tensor):
                    assert drawn[key].stride() == drawn_here[key].clone().stride(), key
            expected, precise = there.outputs(job, drawn, precise=True)
            expected_here, precise_here = here.outputs(job, drawn_here, precise=True)
            assert list(expected) == list(definition.outputs)
            assert list(precise) == list(precise_here)
            for key in expected:
                _same(expected[key], expected_here[key], f"{name} output {key}")
            for key in precise:
                _same(precise[key], precise_here[key], f"{name} float64 output {key}")
        seeds = [11, 12, 13]  # shaped in one request: each as the judge draws it alone
        many = there.draw_many(_job(definition, workload, there), device, seeds, (1.0, 0.0))
        for seed, drawn in zip(seeds, many, strict=True):
            alone = here.draw(_job(definition, workload, here), device, seed, (1.0, 0.0))
            assert list(drawn) == list(alone)
            for key in drawn:
                _same(drawn[key], alone[key], f"{name} seed {seed} input {key}")
        job = _job(definition, workload, there)
        draws = [there.draw(job, device, seed, (1.0, 0.0)) for seed in (5, 6, 7)]
        for graph in (False, True) if device.type == "cuda" else (False,):
            timing = there.time(job, device, draws, graph)
            assert timing.median_ms > 0 and timing.count > 0
            modes = {"cpu_clock"} if device.type == "cpu" else EVENT_MODES | {"cuda_graph"}
            assert timing.mode in modes, timing.mode
    finally:
        there.close()
    return there


# A reference that returns float32 for a bfloat16 output, a transposed view, and whose float64
# run returns float32: each must reach the judge as it was, not cast to what was expected.
ODD_RESULTS = Definition(
    name="odd_results",
    op_type="test",
    axes={"rows": AxisVar(), "cols": AxisVar()},
    inputs={"x": TensorSpec(shape=["rows", "cols"], dtype="bfloat16")},
    outputs={
        "widened": TensorSpec(shape=["rows", "cols"], dtype="bfloat16"),
        "turned": TensorSpec(shape=["cols", "rows"], dtype="bfloat16"),
    },
    reference=(
        "import torch\n\n\ndef run(x):\n"
        "    return x.float() * 3, (x * 2).t()\n\n\n"
        "def make_inputs(axes, inputs, params, generator, device):\n"
        "    wide = torch.randn(axes['cols'], axes['rows'], generator=generator)\n"
        "    inputs['x'] = wide.to(torch.bfloat16).t()\n"
        "    return inputs\n"
    ),
)


@pytest.mark.timeout(600)
def test_results_of_other_dtypes_and_layouts_arrive_as_they_were(sandboxes: Sandboxes) -> None:
    workload = Workload(uuid="odd", axes={"rows": 5, "cols": 3}, inputs={"x": RandomInput()})
    device = torch.device("cpu")
    here = InJudgeReference(ODD_RESULTS)
    there = SandboxedReference(ODD_RESULTS, device, sandboxes)
    try:
        there.ready(60.0)
        for seed in (3, 4):  # the second draw finds the layouts the first one taught
            job = _job(ODD_RESULTS, workload, there)
            drawn = there.draw(job, device, seed, (1.0, 0.0))
            drawn_here = here.draw(_job(ODD_RESULTS, workload, here), device, seed, (1.0, 0.0))
            assert drawn["x"].stride() == (1, 5) == drawn_here["x"].stride()
            _same(drawn["x"], drawn_here["x"], "x")
            expected, precise = there.outputs(job, drawn, precise=True)
            assert expected["widened"].dtype == torch.float32
            _same(expected["widened"], drawn_here["x"].float() * 3, "widened")
            _same(expected["turned"], (drawn_here["x"] * 2).t(), "turned")
            assert precise["widened"].dtype == torch.float32
            assert precise["turned"].dtype == torch.float64
    finally:
        there.close()


@pytest.mark.timeout(600)
def test_many_sets_in_one_request_each_get_their_own_results(sandboxes: Sandboxes) -> None:
    """``outputs_many``: the sets of one request, results of layouts not seen yet delivered to
    measure after it (held by the sandbox one set's after another's), each set its own values,
    in the definition's dtypes and in float64; asked of the sandbox once."""
    workload = Workload(uuid="odd-many", axes={"rows": 4, "cols": 6}, inputs={"x": RandomInput()})
    device = torch.device("cpu")
    here = InJudgeReference(ODD_RESULTS)
    there = SandboxedReference(ODD_RESULTS, device, sandboxes)
    asked: list[str] = []
    request = there._request

    def counted(*message: Any, **keywords: Any) -> Any:
        asked.append(message[0])
        return request(*message, **keywords)

    there._request = counted  # type: ignore[method-assign]
    try:
        there.ready(60.0)
        job = _job(ODD_RESULTS, workload, there)
        draws = [there.draw(job, device, seed, (1.0, 0.0)) for seed in (11, 12, 13)]
        asked.clear()
        found = there.outputs_many(job, draws, precise=True)
        assert asked.count("expect") == 1, asked
        for drawn, (expected, precise) in zip(draws, found, strict=True):
            _same(expected["widened"], drawn["x"].float() * 3, "widened")
            _same(expected["turned"], (drawn["x"] * 2).t(), "turned")
            _, precise_here = here.outputs(_job(ODD_RESULTS, workload, here), drawn, precise=True)
            for key in precise:
                _same(precise[key], precise_here[key], f"float64 {key}")
        asked.clear()
        assert [e["turned"].shape for e, _ in there.outputs_many(job, draws)] == [(6, 4)] * 3
        assert asked == []  # kept with the draws
    finally:
        there.close()


def test_the_sandboxed_reference_runs_with_the_judge_s_threads(tmp_path: Path) -> None:
    """A CPU reduction's rounding follows the thread count: the reference's sandbox takes the
    judge's, where a solution's sandbox runs with one."""
    definition = Definition(
        name="threads",
        op_type="test",
        axes={"n": AxisVar()},
        inputs={"x": TensorSpec(shape=["n"], dtype="float32")},
        outputs={"count": TensorSpec(shape=None, dtype="int64")},
        reference="import torch\n\n\ndef run(x):\n    return torch.tensor(torch.get_num_threads())\n",
    )
    workload = Workload(uuid="t", axes={"n": 4}, inputs={"x": RandomInput()})
    sandboxes = Sandboxes("cpu", tmp_path, [])
    there = SandboxedReference(definition, torch.device("cpu"), sandboxes)
    try:
        there.ready(60.0)
        job = _job(definition, workload, there)
        expected, _ = there.outputs(job, there.draw(job, torch.device("cpu"), 1, (1.0, 0.0)))
        assert int(expected["count"]) == torch.get_num_threads()
    finally:
        there.close()
        sandboxes.close()


@contextlib.contextmanager
def _counted_rmsnorm(
    sandboxes: Sandboxes,
) -> Iterator[tuple[SandboxedReference, CheckedJob, list[str]]]:
    """rmsnorm_bf16's reference in its sandbox on the CPU, a job of its strided workload, and the
    operations the reference asks of its sandbox from now on, in order."""
    definition = load_library().definitions["rmsnorm_bf16"]
    there = SandboxedReference(definition, torch.device("cpu"), sandboxes)
    asked: list[str] = []
    send = there._send

    def counted(operation: str, *rest: object) -> dict[str, object]:
        if operation != "deliver_held":  # a result of a layout not seen yet: delivered after
            asked.append(operation)
        return send(operation, *rest)

    there._send = counted  # type: ignore[method-assign]
    try:
        there.ready(60.0)
        yield there, _job(definition, _workload("rmsnorm_bf16", "row_stride"), there), asked
    finally:
        there.close()


def test_a_draw_and_its_outputs_are_asked_of_the_sandbox_once(sandboxes: Sandboxes) -> None:
    """Every job of a workload draws the same seeds: the second solution's draws and expected
    outputs come from what the first one's asked; a set with a changed input (a partial refill
    copies what it changes) is never taken for the kept draw."""
    cpu = torch.device("cpu")
    with _counted_rmsnorm(sandboxes) as (there, job, asked):
        drawn = there.draw(job, cpu, 1, (1.0, 0.0))
        expected, precise = there.outputs(job, drawn, precise=True)
        assert asked == ["make_inputs", "expect"]
        again = there.draw(job, cpu, 1, (1.0, 0.0))  # the next solution's job
        assert there.outputs(job, again, precise=True) == (expected, precise)
        assert asked == ["make_inputs", "expect"]
        changed = dict(again, x=again["x"].clone())
        changed["x"].view(-1)[0] += 1
        other, _ = there.outputs(job, changed)
        assert asked == ["make_inputs", "expect", "expect"]
        assert not torch.equal(other["out"], expected["out"])


def test_a_timings_rotated_draws_are_shaped_by_one_request(sandboxes: Sandboxes) -> None:
    """A dozen seeds' ``make_inputs`` in one request (``draw_many``), each set its own (the
    generator of its own seed), and drawn again, none asked at all: they are kept. A pass's
    refills drawn ahead (``draw_ahead``) take one request, and their draws none."""
    cpu = torch.device("cpu")
    with _counted_rmsnorm(sandboxes) as (there, job, asked):
        seeds = list(range(20, 32))
        many = there.draw_many(job, cpu, seeds, (1.0, 0.0))
        assert asked == ["make_inputs"]
        assert len(many) == len(seeds)
        assert all(not torch.equal(many[0]["x"], other["x"]) for other in many[1:])
        again = there.draw_many(job, cpu, seeds, (1.0, 0.0))
        assert asked == ["make_inputs"]
        assert all(a["x"] is b["x"] for a, b in zip(many, again, strict=True))
        there.draw_ahead(job, cpu, [40, 41, 42])  # a pass's refills, drawn before it
        assert asked == ["make_inputs", "make_inputs"]
        refills = [there.draw(job, cpu, seed, (1.0, 0.0)) for seed in (40, 41, 42)]
        assert asked == ["make_inputs", "make_inputs"]
        assert not torch.equal(refills[0]["x"], refills[1]["x"])


def test_a_reference_out_of_memory_once_is_run_again_with_its_memory_given_back(
    sandboxes: Sandboxes,
) -> None:
    """On the largest sets the judge, the paused solution and the reference's sandbox each hold a
    copy: a reference that runs out of memory once (an H200's attention_decode_fp16 at batch 64
    and 32k keys) is run again after its sandbox gives back what it keeps, not reported broken."""
    reference = (
        "import torch\n\n_CALLS = []\n\n\ndef run(x):\n"
        "    _CALLS.append(1)\n"
        "    if len(_CALLS) == 1:\n"
        "        raise torch.OutOfMemoryError('CUDA out of memory (the first call only)')\n"
        "    return x * 2\n"
    )
    with _doubling("out_of_memory_once", reference, sandboxes) as (there, job, drawn):
        expected, _ = there.outputs(job, drawn)
        assert isinstance(drawn["x"], torch.Tensor)
        _same(expected["y"], drawn["x"] * 2, "y")


@contextlib.contextmanager
def _doubling(
    name: str, reference: str, sandboxes: Sandboxes
) -> Iterator[tuple[SandboxedReference, CheckedJob, dict[str, Any]]]:
    """A one-input definition with ``reference`` (meant to double it) in its sandbox on the CPU,
    a job of it, and a draw."""
    definition = Definition(
        name=name,
        op_type="test",
        axes={"n": AxisVar()},
        inputs={"x": TensorSpec(shape=["n"], dtype="float32")},
        outputs={"y": TensorSpec(shape=["n"], dtype="float32")},
        reference=reference,
    )
    workload = Workload(uuid="oom", axes={"n": 8}, inputs={"x": RandomInput()})
    device = torch.device("cpu")
    there = SandboxedReference(definition, device, sandboxes)
    try:
        there.ready(60.0)
        job = _job(definition, workload, there)
        yield there, job, there.draw(job, device, 1, (1.0, 0.0))
    finally:
        there.close()


def test_a_reference_out_of_memory_twice_is_the_devices_not_the_datasets(
    sandboxes: Sandboxes,
) -> None:
    """Where the retry runs out of memory too, the device is short, with the judge's sets and the
    paused solution beside the reference: the job is skipped as too large to judge on this device
    (``torch.OutOfMemoryError``, ``outcomes.JUDGE_OUT_OF_MEMORY``), not reported as the
    definition's reference raising, which would blame the dataset."""
    reference = (
        "import torch\n\n\ndef run(x):\n"
        "    raise torch.OutOfMemoryError('CUDA out of memory. Tried to allocate 3.73 GiB')\n"
    )
    raised = pytest.raises(torch.OutOfMemoryError, match=r"the reference's sandbox: .*3\.73 GiB")
    with _doubling("out_of_memory_always", reference, sandboxes) as (there, job, drawn), raised:
        there.outputs(job, drawn)
