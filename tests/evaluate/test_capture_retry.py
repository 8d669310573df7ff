"""A call that cannot be captured in a CUDA graph is timed with events, whatever the failed capture
did to its process. Published CUDA solutions (flashinfer-bench's bench/test/results) call
``cudaDeviceSynchronize()`` after their launch inside a check that throws, or exits, on an error:
inside a capture the synchronization fails ("operation not permitted when stream is capturing").
Both must PASS, timed with events, as FlashInfer-Bench (which never captures) passes them."""

from __future__ import annotations

from pathlib import Path

import pytest

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
from kernelarena.evaluate.executors.benchmark import Benchmark
from kernelarena.evaluate.executors.jobs import Timeouts
from kernelarena.evaluate.options import Options

DEFINITION = Definition(
    name="scale_synchronizing",
    op_type="test",
    axes={"n": AxisVar()},
    inputs={
        "x": TensorSpec(shape=["n"], dtype="float32"),
        "factor": TensorSpec(shape=None, dtype="float32"),
    },
    outputs={"out": TensorSpec(shape=["n"], dtype="float32")},
    reference="def run(x, factor):\n    return x * factor\n",
)
KERNEL = """#include <cstdio>
#include <cstdlib>
#include <stdexcept>
#include <string>

#include <cuda_runtime.h>

#define CUDA_CHECK(call)                                                                  \\
  do {                                                                                    \\
    cudaError_t status_ = (call);                                                         \\
    if (status_ != cudaSuccess) {                                                         \\
      ON_ERROR(cudaGetErrorString(status_));                                              \\
    }                                                                                     \\
  } while (0)

__global__ void scale_kernel(const float* x, float factor, float* out, long n) {
  long i = blockIdx.x * static_cast<long>(blockDim.x) + threadIdx.x;
  if (i < n) out[i] = x[i] * factor;
}

void launch_scale(const float* x, float factor, float* out, long n, cudaStream_t stream) {
  scale_kernel<<<(n + 255) / 256, 256, 0, stream>>>(x, factor, out, n);
  CUDA_CHECK(cudaGetLastError());
  CUDA_CHECK(cudaDeviceSynchronize());
}
"""
ON_ERROR = {
    "throws": '#define ON_ERROR(text) throw std::runtime_error(std::string("CUDA error: ") + text)\n',
    "exits": '#define ON_ERROR(text) (std::fprintf(stderr, "CUDA error: %s\\n", text), std::exit(1))\n',
}
MAIN = """#include <torch/extension.h>
#include <c10/cuda/CUDAStream.h>
#include <cuda_runtime.h>

void launch_scale(const float* x, float factor, float* out, long n, cudaStream_t stream);

void run(torch::Tensor x, double factor, torch::Tensor out) {
  launch_scale(x.data_ptr<float>(), static_cast<float>(factor), out.data_ptr<float>(), x.numel(),
               c10::cuda::getCurrentCUDAStream());
}

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) { m.def("run", &run); }
"""


def _solution(how: str) -> Solution:
    return Solution(
        name=f"scale_synchronizing_{how}",
        definition=DEFINITION.name,
        author="tests",
        spec=BuildSpec(
            language="cuda", target_hardware=["cuda"], entry_point="main.cpp::run", binding="torch"
        ),
        sources=[
            SourceFile(path="kernel.cu", content=ON_ERROR[how] + KERNEL),
            SourceFile(path="main.cpp", content=MAIN),
        ],
    )


@pytest.mark.gpu
@pytest.mark.timeout(900)
def test_solutions_that_synchronize_inside_their_call_pass_timed_with_events(
    tmp_path: Path,
) -> None:
    dataset = TraceSet(root=tmp_path)
    dataset.add_definition(DEFINITION)
    for size in (4096, 1 << 22):
        dataset.add_workload(
            DEFINITION.name,
            Workload(
                uuid=f"n{size}",
                axes={"n": size},
                inputs={"x": RandomInput(), "factor": ScalarInput(value=1.5)},
            ),
        )
    for how in ON_ERROR:
        dataset.add_solution(_solution(how))
    traces = Benchmark(
        dataset,
        devices="cuda:0",
        options=Options(trials=2, budget_ms=20, max_iterations=20),
        timeouts=Timeouts(build_s=600, run_s=60, startup_s=300),
    ).run_all()
    assert len(traces) == 2 * len(ON_ERROR)
    for trace in traces:
        evaluation = trace.evaluation
        assert evaluation is not None
        assert evaluation.status is Status.PASSED, f"{trace.solution}:\n{evaluation.log}"
        assert evaluation.performance is not None
        assert evaluation.performance.timing_mode in ("cuda_events_l2_flush", "cuda_events")
        # Its capture failed: apply must never pick it inside one.
        assert evaluation.performance.capturable is False, evaluation.performance
