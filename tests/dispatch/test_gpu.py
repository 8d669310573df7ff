"""On a GPU: winners in every language run in-process through apply with CUDA tensors."""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest
import torch

import kernelarena
import kernelarena.ops as ops
from kernelarena.compile import build_solution
from kernelarena.library import load_library
from kernelarena.runtime.capture import collector_paused
from kernelarena.testing import assert_close
from tests.dispatch.toys import add, timed, workload

pytestmark = pytest.mark.gpu


def test_cuda_winners_of_three_languages_run_in_process() -> None:
    library = load_library()
    # Only this test's timings decide: the library ships measured scale_bf16 traces of this GPU
    # (an H200's favour torch at 4096 x 4096), which would otherwise compete with them.
    library.traces.pop("scale_bf16", None)
    definition = library.definitions["scale_bf16"]
    gpu = torch.cuda.get_device_name(0)
    solutions = {s: library.solutions[f"scale_bf16_{s}"] for s in ("triton", "cuda", "torch_eager")}
    winners = {(8, 1024): "triton", (4096, 4096): "cuda", (64, 64): "torch_eager"}
    for (rows, cols), winner in winners.items():
        load = workload(definition, rows=rows, cols=cols)
        add(
            library,
            *(
                timed(definition, solution, load, 1.0 if name == winner else 9.0, hardware=gpu)
                for name, solution in solutions.items()
            ),
        )
    runtime = kernelarena.enable_apply(library)
    for rows, cols in [*winners, (9, 1000)]:  # the last: nearest measured is 8 x 1024
        x = torch.randn(rows, cols, device="cuda", dtype=torch.bfloat16)
        expected = (x.float() * 1.5).to(torch.bfloat16)
        assert_close(ops.scale(x, 1.5), expected, 1e-2, 1e-2)
    built = {name for name, device in runtime._runnables if device.startswith("cuda")}
    assert built == {f"scale_bf16_{w}" for w in winners.values()}


def test_inside_cuda_graph_capture_apply_runs_the_gpu_time_winner() -> None:
    """triton is faster on the GPU, torch_eager per eager call (made-up figures): an eager call
    runs torch_eager, a captured one triton, at the same key. The eager call warms triton first
    (its autotuner times the shape there, never inside the capture)."""
    library = load_library()
    library.traces.pop("scale_bf16", None)
    definition = library.definitions["scale_bf16"]
    gpu = torch.cuda.get_device_name(0)
    load = workload(definition, rows=64, cols=64)
    names = {"triton": (1.0, 30.0), "torch_eager": (5.0, 6.0)}  # (GPU us, eager us)
    solutions = {name: library.solutions[f"scale_bf16_{name}"] for name in names}
    add(
        library,
        *(
            timed(definition, solutions[n], load, g, hardware=gpu, eager_us=e)
            for n, (g, e) in names.items()
        ),
    )
    runtime = kernelarena.enable_apply(library)
    ran: list[str] = []
    for name, solution in solutions.items():
        built = build_solution(definition, solution, "cuda:0")

        def counted(*args: Any, _fn: Any = built.fn, _name: str = name) -> Any:
            ran.append(_name)
            return _fn(*args)

        runtime._runnables[(solution.name, "cuda:0")] = dataclasses.replace(built, fn=counted)
    x = torch.randn(64, 64, device="cuda", dtype=torch.bfloat16)
    expected = (x.float() * 1.5).to(torch.bfloat16)
    assert_close(ops.scale(x, 1.5), expected, 1e-2, 1e-2)
    assert ran == ["triton", "torch_eager"]
    graph = torch.cuda.CUDAGraph()
    with collector_paused(), torch.cuda.graph(graph):
        captured = ops.scale(x, 1.5)
    graph.replay()
    torch.cuda.synchronize()
    assert ran[2:] == ["triton"]
    assert_close(captured, expected, 1e-2, 1e-2)


def test_capture_check_answers_on_every_stream() -> None:
    """apply's capture query: False on the default stream and on a side stream outside capture,
    True inside ``torch.cuda.graph`` (which captures a side stream), on the tensor's device."""
    from kernelarena.dispatch.calls import capture_check

    capturing = capture_check(torch.device("cuda", 0))
    assert capturing is not None
    assert capturing() is False
    side = torch.cuda.Stream()
    with torch.cuda.stream(side):
        assert capturing() is False
    seen: list[bool] = []
    x = torch.zeros(4, device="cuda")
    graph = torch.cuda.CUDAGraph()
    with collector_paused(), torch.cuda.graph(graph):
        seen.append(capturing())
        x.add_(1)
    assert seen == [True]
    assert capturing() is False
    assert capture_check(torch.device("cpu")) is None
