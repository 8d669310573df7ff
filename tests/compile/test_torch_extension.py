"""``binding: torch`` solutions: built with torch.utils.cpp_extension in the locked build cache, the
entry point found by name; CUDA ones skipped (not failed) where torch has no CUDA."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import torch

from kernelarena.compile import BuildError, DependencyMissing, build_solution, builder_for
from kernelarena.compile.cuda import CudaBuilder, cuda_home
from kernelarena.compile.torch_extension import TorchExtensionBuilder
from kernelarena.data import (
    AxisVar,
    BuildSpec,
    Definition,
    RandomInput,
    ScalarInput,
    Solution,
    SourceFile,
    Status,
    TensorSpec,
    TraceSet,
    Workload,
)
from kernelarena.evaluate.compare import compare
from kernelarena.evaluate.executors.benchmark import Benchmark
from kernelarena.evaluate.inputs import allocate_outputs, generate_inputs, load_reference
from kernelarena.evaluate.options import Options
from tests.data import fib_shapes

DEFINITION = Definition(
    name="axpy",
    op_type="test",
    axes={"n": AxisVar()},
    inputs={
        "x": TensorSpec(shape=["n"], dtype="float32"),
        "y": TensorSpec(shape=["n"], dtype="float32"),
        "alpha": TensorSpec(shape=None, dtype="float32"),
    },
    outputs={"out": TensorSpec(shape=["n"], dtype="float32")},
    reference="def run(x, y, alpha):\n    return alpha * x + y\n",
)

# A C++ extension in the published layout: the loop in its own file, the binding in main.cpp.
AXPY_H = """#pragma once
#include <cstdint>
void axpy(const float* x, const float* y, double alpha, float* out, int64_t n);
"""
AXPY_CPP = """#include "axpy.h"
void axpy(const float* x, const float* y, double alpha, float* out, int64_t n) {
  const float a = static_cast<float>(alpha);
  for (int64_t i = 0; i < n; ++i) out[i] = a * x[i] + y[i];
}
"""
MAIN_CPP = """#include <torch/extension.h>
#include "axpy.h"

void run(torch::Tensor x, torch::Tensor y, double alpha, torch::Tensor out) {
  TORCH_CHECK(x.is_contiguous() && y.is_contiguous() && out.is_contiguous(), "contiguous only");
  TORCH_CHECK(x.scalar_type() == torch::kFloat32, "x must be float32");
  axpy(x.data_ptr<float>(), y.data_ptr<float>(), alpha, out.data_ptr<float>(), x.numel());
}

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) { m.def("run", &run); }
"""


def _solution(
    language: str = "cpp",
    binding: str | None = "torch",
    entry: str = "main.cpp::run",
    main: str = MAIN_CPP,
    extra: tuple[tuple[str, str], ...] = (),
) -> Solution:
    return Solution(
        name=f"axpy_{language}_{binding}",
        definition="axpy",
        author="tests",
        spec=BuildSpec(
            language=language,
            target_hardware=["cpu"] if language == "cpp" else ["cuda"],
            entry_point=entry,
            binding=binding,
        ),
        sources=[
            SourceFile(path="axpy.h", content=AXPY_H),
            SourceFile(path="axpy.cpp", content=AXPY_CPP),
            SourceFile(path="main.cpp", content=main),
            *(SourceFile(path=p, content=c) for p, c in extra),
        ],
    )


def test_the_binding_picks_the_builder() -> None:
    assert isinstance(builder_for(_solution(binding="torch")), TorchExtensionBuilder)
    assert isinstance(builder_for(_solution(binding="tvm-ffi")), CudaBuilder)
    assert isinstance(builder_for(_solution(binding=None)), CudaBuilder)
    with pytest.raises(
        BuildError, match=r"spec.binding: 'pybind' is not one of \['tvm-ffi', 'torch'\]"
    ):
        builder_for(_solution(binding="pybind"))


@pytest.mark.skipif(torch.version.cuda is not None, reason="this torch has CUDA: it builds")
def test_cuda_sources_on_a_cpu_torch_are_skipped_not_failed() -> None:
    solution = _solution(language="cuda", extra=(("kernel.cu", "__global__ void k() {}\n"),))
    with pytest.raises(DependencyMissing, match="needs a CUDA build of torch"):
        build_solution(DEFINITION, solution, "cpu")


@pytest.mark.timeout(600)
def test_a_cpp_extension_builds_once_and_runs() -> None:
    runnable = build_solution(DEFINITION, _solution(), "cpu")
    assert runnable.metadata == {"arch": "cpu", "binding": "torch"}
    assert runnable.destination_passing_style
    x, y = torch.randn(1001), torch.randn(1001)  # odd length
    out = torch.full((1001,), float("nan"))
    runnable(x, y, -1.5, out)
    torch.testing.assert_close(out, -1.5 * x + y, rtol=1e-6, atol=1e-6)
    # Another process finds the library in the cache and imports it without building.
    for module in [m for m in sys.modules if m.startswith("solution_")]:
        del sys.modules[module]
    again = build_solution(DEFINITION, _solution(), "cpu")
    assert again.artifact == runnable.artifact
    again(x, y, 2.0, out)
    torch.testing.assert_close(out, 2.0 * x + y, rtol=1e-6, atol=1e-6)


@pytest.mark.timeout(600)
def test_a_cpp_extension_builds_and_passes_inside_the_engines_sandbox(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Built afresh (an empty cache) by a confined process of the build pool, then checked."""
    monkeypatch.setenv("KERNELARENA_CACHE", str(tmp_path / "cache"))
    dataset = TraceSet(root=tmp_path / "data")
    dataset.add_definition(DEFINITION)
    for n in (1, 4097):
        inputs = {"x": RandomInput(), "y": RandomInput(), "alpha": ScalarInput(value=0.75)}
        dataset.add_workload("axpy", Workload(uuid=f"n{n}", axes={"n": n}, inputs=inputs))
    dataset.add_solution(_solution())
    traces = Benchmark(dataset, devices="cpu", options=Options(trials=2, timing=False)).run_all()
    assert [t.evaluation.status for t in traces if t.evaluation] == [Status.PASSED] * 2, [
        t.evaluation.log for t in traces if t.evaluation
    ]
    # Built by the build pool, confined, into the solution's own caches, where its sandbox loaded it.
    assert list((tmp_path / "cache").glob("sandboxes/*/build/torch_extension/*/solution_*.so"))


@pytest.mark.timeout(600)
def test_a_missing_entry_point_names_what_the_module_defines() -> None:
    with pytest.raises(BuildError, match=r"'forward' is not defined .* \(it defines \['run'\]\)"):
        build_solution(DEFINITION, _solution(entry="main.cpp::forward"), "cpu")


@pytest.mark.timeout(600)
def test_a_compile_error_is_a_build_error_with_the_compiler_message() -> None:
    broken = MAIN_CPP.replace("x.numel());", "x.numel())")  # a missing semicolon
    with pytest.raises(
        BuildError, match="compiling the torch extension for the CPU failed"
    ) as raised:
        build_solution(DEFINITION, _solution(main=broken), "cpu")
    assert "main.cpp:7" in str(raised.value) and "expected" in str(raised.value)


@pytest.mark.gpu
@pytest.mark.timeout(1200)
@pytest.mark.parametrize("name", fib_shapes.NAMES)
def test_cuda_extensions_build_for_the_device_and_match_the_reference(name: str) -> None:
    """Each fib_shapes CUDA solution: built for this GPU's architecture, equal to the reference within
    the definition's tolerances on every workload, and launched on the current stream (a CUDA graph
    captured on a side stream replays it)."""
    definition = fib_shapes.definition(name)
    runnable = build_solution(definition, fib_shapes.cuda_solution(name), "cuda:0")
    major, minor = torch.cuda.get_device_capability(0)
    assert runnable.metadata["arch"] == f"sm_{major}{minor}{'a' if major >= 9 else ''}"
    device = torch.device("cuda:0")
    reference = load_reference(definition)
    for workload in fib_shapes.workloads(name):
        axes = definition.resolve_axes(workload.axes)
        inputs = generate_inputs(definition, workload, axes, device, 7, None)
        arguments = [inputs[n] for n in definition.inputs]
        outputs = allocate_outputs(definition, axes, device)
        runnable(*arguments, *outputs.values())
        expected = reference["run"](*arguments)
        for (output, produced), wanted in zip(outputs.items(), expected, strict=True):
            spec = definition.outputs[output]
            result = compare(output, produced, wanted, spec.dtype, definition.tolerance_for(output))
            assert result.ok, f"{workload.uuid}: {result.describe()}"
        if all(t.numel() == 0 for t in outputs.values()):
            continue  # an empty batch launches nothing: there is no graph to capture
        captured = {n: torch.empty_like(t) for n, t in outputs.items()}
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            runnable(*arguments, *captured.values())
        graph.replay()
        torch.cuda.synchronize()
        for output in outputs:
            assert torch.equal(captured[output], outputs[output]), f"{workload.uuid}: {output}"


@pytest.mark.timeout(600)
@pytest.mark.parametrize("name", fib_shapes.NAMES)
def test_the_fixture_kernels_compile_with_nvcc(name: str, tmp_path: Path) -> None:
    """Where torch has no CUDA the extensions are skipped, so nvcc alone checks their device code."""
    try:
        nvcc = cuda_home() / "bin" / "nvcc"
    except DependencyMissing:
        pytest.skip("no CUDA toolkit")
    folder = fib_shapes.FIXTURES / name / "cuda"
    command = [str(nvcc), "-std=c++17", "-O3", "-gencode=arch=compute_90a,code=sm_90a"]
    command += ["-c", str(folder / "kernel.cu"), "-o", str(tmp_path / "kernel.o")]
    result = subprocess.run(command, capture_output=True, text=True, check=False)
    assert result.returncode == 0, result.stderr
