"""How fast can one kernel read attention_decode's K and V? Read floors beside the committed
Triton decode kernel, on a GPU.

The decode bar (issue 20) is a share of the copy bandwidth, measured on a 512 MB copy; a call at
batch 1 with an 8k cache reads 34 MB, where the launch and the ramp of the memory system weigh.
This probe times, for the same bytes and under the same conditions (``benchmarks/probes/probe_decode.py``'s
``Probe``: CUDA graph replays over input sets rotated past the L2):

- ``plan``: the committed decode kernel (checked against the float32 reference), first and last;
- ``floor``: probe_decode's bare Triton read (two programs an SM);
- ``vector CxTuU``: CUDA, C CTAs an SM of T threads, each thread U 16-byte loads in flight per
  buffer (``benchmarks/probes/read_floor/read_floor.cu``);
- ``bulk CxSxKk``: CUDA, C CTAs an SM, each streaming one contiguous chunk with cp.async.bulk
  into a ring of S stages of K KB.

The CUDA file is built with apache-tvm-ffi for sm_90a (a few seconds). Output: one line a variant.

    python benchmarks/probes/probe_read_floor.py
"""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

sys.path.insert(0, str(Path(__file__).parent))
import probe_decode

from kernelarena.evaluate.judge.ceilings import measure_ceilings
from kernelarena.testing import build

SOURCE = Path(__file__).parent / "read_floor" / "read_floor.cu"
SHAPES = [(1, 8192), (1, 32768), (4, 8192)]
VECTOR = [
    (1, 1024, 4),
    (2, 512, 4),
    (2, 512, 8),
    (4, 256, 8),
    (4, 512, 4),
    (8, 256, 4),
    (2, 1024, 2),
]
BULK = [(1, 4, 32), (1, 6, 32), (1, 8, 16), (2, 4, 16), (1, 12, 8), (2, 12, 8), (3, 4, 16)]


def load_module() -> Any:
    import tvm_ffi
    import tvm_ffi.cpp

    os.environ.setdefault("TVM_FFI_CUDA_ARCH_LIST", "9.0a")
    folder = Path(os.environ.get("TMPDIR", "/tmp")) / "kernelarena_read_floor"
    folder.mkdir(exist_ok=True)
    library = tvm_ffi.cpp.build(
        name="read_floor",
        cuda_files=[str(SOURCE)],
        extra_cuda_cflags=["-O3", "-std=c++17"],
        build_directory=str(folder),
    )
    return tvm_ffi.load_module(library)


def main() -> int:
    if not torch.cuda.is_available():
        print("probe_read_floor: needs a CUDA GPU", file=sys.stderr)
        return 2
    started = time.time()
    device = torch.device("cuda")
    reads = load_module()
    sink = torch.zeros(16, dtype=torch.int32, device=device)
    copy_gbps = measure_ceilings(device)["copy_gbps"]
    print(f"{torch.cuda.get_device_name()} copy {copy_gbps:.0f} GB/s", flush=True)
    module = sys.modules[build(probe_decode.DEFINITION, "triton", "cuda").fn.__module__]
    probe = probe_decode.Probe(module, device, copy_gbps, budget_s=1e9)

    def vector(ctas: int, threads: int, unroll: int) -> Callable[..., Any]:
        return lambda q, k, v, *rest, **options: reads.vector_read(
            k, v, sink, ctas, threads, unroll
        )

    def bulk(ctas: int, stages: int, chunk_kb: int) -> Callable[..., Any]:
        return lambda q, k, v, *rest, **options: reads.bulk_read(k, v, sink, ctas, stages, chunk_kb)

    for batch, cache in SHAPES:
        shape = probe_decode.Shape(batch, cache, False, device)
        print(f"## b{batch} {cache}: {shape.bytes / 1e6:.1f} MB, {shape.sets} sets", flush=True)
        probe.measure(shape, "plan", module.launch, None, None, label="plan")
        probe.measure(
            shape, "floor", probe_decode.read_floor, None, None, label="triton", checked=False
        )
        for ctas, threads, unroll in VECTOR:
            label = f"{ctas}x{threads}u{unroll}"
            probe.measure(
                shape, "vector", vector(ctas, threads, unroll), None, None, label, checked=False
            )
        for ctas, stages, chunk_kb in BULK:
            label = f"{ctas}x{stages}x{chunk_kb}k"
            probe.measure(
                shape, "bulk", bulk(ctas, stages, chunk_kb), None, None, label, checked=False
            )
        probe.measure(shape, "plan", module.launch, None, None, label="plan again")
    print(f"total {time.time() - started:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
