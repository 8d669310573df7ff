"""Development aid for the CUDA nvfp4_gemv on a GPU: each compiled variant run explicitly on one
shape (checked against the reference, then timed as CUDA graph replays over input sets 3x the L2),
beside a bare streaming-read kernel over the same bytes (the memory side's ceiling for this
traffic), so that a variant's gap splits into memory and decode. Run under ncu with ``--calls``
to profile: ``ncu -k regex:gemv_ python scripts/probe_nvfp4.py --calls 2 --no-time``.

    python scripts/probe_nvfp4.py [--shape M,K,L ...] [--variants 0,2,7] [--calls N] [--no-time]
"""

# ruff: noqa: B023  (the lambdas are called before the loop moves on)
from __future__ import annotations

import argparse
import math
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks.bench_nvfp4_gemv import INPUTS, bytes_moved, mismatch

from kernelarena.evaluate.ceilings import measure_ceilings
from kernelarena.evaluate.timing import time_cuda_graph
from kernelarena.testing import build, library_definition, reference

READ_SOURCE = r"""
#include <tvm/ffi/container/tensor.h>
#include <tvm/ffi/extra/c_env_api.h>
#include <tvm/ffi/function.h>
#include <cstdint>

__global__ void read_kernel(const uint4* data, int64_t count, uint32_t* sink) {
  uint32_t mixed = 0;
  const int64_t stride = int64_t(gridDim.x) * blockDim.x;
  int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x;
  for (; i + 3 * stride < count; i += 4 * stride) {
    uint4 v[4];
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      asm volatile("ld.global.nc.L1::no_allocate.v4.u32 {%0, %1, %2, %3}, [%4];"
                   : "=r"(v[j].x), "=r"(v[j].y), "=r"(v[j].z), "=r"(v[j].w) : "l"(data + i + j * stride));
    }
#pragma unroll
    for (int j = 0; j < 4; ++j) mixed ^= v[j].x ^ v[j].y ^ v[j].z ^ v[j].w;
  }
  for (; i < count; i += stride) {
    const uint4 v = data[i];
    mixed ^= v.x ^ v.y ^ v.z ^ v.w;
  }
  if (mixed == 0x9E3779B9u) sink[0] = mixed;
}

void read_only(tvm::ffi::TensorView data, tvm::ffi::TensorView sink, int64_t blocks) {
  auto stream = static_cast<cudaStream_t>(TVMFFIEnvGetStream(data.device().device_type, data.device().device_id));
  const int64_t count = data.size(0) / 16;
  read_kernel<<<blocks, 512, 0, stream>>>(static_cast<const uint4*>(data.data_ptr()), count,
                                          static_cast<uint32_t*>(sink.data_ptr()));
}
"""


def graph_time_us(calls: list, device: torch.device) -> float:
    """Median us per call of one CUDA graph holding ``calls`` (no-argument callables)."""
    timing = time_cuda_graph(lambda i: calls[i](), device, calls_per_graph=len(calls))
    return timing.median_ms * 1e3


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--shape", action="append", default=None, help="M,K,L (repeatable)")
    parser.add_argument("--variants", default="", help="comma-separated (default: all)")
    parser.add_argument("--calls", type=int, default=0, help="plain calls per variant (for ncu)")
    parser.add_argument("--no-time", action="store_true")
    parser.add_argument("--generator", default="gpumode")
    args = parser.parse_args()
    shapes = [tuple(int(x) for x in s.split(",")) for s in (args.shape or ["7168,16384,1"])]
    device = torch.device("cuda")
    module = build("nvfp4_gemv", "cuda", "cuda").metadata["module"]
    variants = (
        [int(v) for v in args.variants.split(",")]
        if args.variants
        else list(range(module.variant_count()))
    )
    definition = library_definition("nvfp4_gemv")
    ref = reference("nvfp4_gemv")
    tolerance = definition.tolerance_for("c")
    l2 = torch.cuda.get_device_properties(0).L2_cache_size
    copy_gbps = None
    if not args.no_time:
        # The engine's ceiling: events around single copies (captured in a graph, a copy
        # measured 2.8 TB/s on an H200 against 4.25: likely a memcpy node on the copy engines).
        copy_gbps = measure_ceilings(device)["copy_gbps"]
        import tvm_ffi.cpp

        reader = tvm_ffi.cpp.load_inline(
            "probe_read", cuda_sources=READ_SOURCE, functions=["read_only"]
        )
        sms = torch.cuda.get_device_properties(0).multi_processor_count
        print(f"copy ceiling {copy_gbps:.0f} GB/s (512 MB copy, read + write)")
    for m, k, batches in shapes:
        axes = definition.resolve_axes({"m": m, "k": k, "l": batches, "n": 128})
        case_bytes = bytes_moved(m, k, batches)
        sets = max(2, min(20, math.ceil(3 * l2 / case_bytes)))
        made = [
            ref["make_inputs"](
                dict(axes),
                {},
                {"generator": args.generator},
                torch.Generator(device=device).manual_seed(i),
                device,
            )
            for i in range(sets)
        ]
        arguments = [tuple(d[name] for name in INPUTS) for d in made]
        outputs = [
            torch.empty(batches, m, 1, dtype=torch.float16, device=device).permute(1, 2, 0)
            for _ in range(sets)
        ]
        expected = ref["run"](*arguments[0])
        light_us = case_bytes / (copy_gbps * 1e3) if copy_gbps else None
        print(f"\n{m}x{k}x{batches}: {case_bytes / 1e6:.1f} MB, {sets} input sets", end="")
        print(f", speed of light {light_us:.2f} us" if light_us else "")
        if not args.no_time:
            sink = torch.zeros(4, dtype=torch.int32, device=device)
            a_only = [d["a"].view(torch.uint8).reshape(-1) for d in made]
            # A with its scales is ~ case_bytes; the reader streams A alone, scaled to case bytes.
            for blocks_per_sm in (2, 4):
                us = graph_time_us(
                    [
                        (lambda i=i: reader.read_only(a_only[i % sets], sink, blocks_per_sm * sms))
                        for i in range(20)
                    ],
                    device,
                )
                gbps = a_only[0].numel() / us / 1e3
                print(
                    f"  bare read of A ({blocks_per_sm} blocks of 512/SM): {us:7.2f} us, {gbps:6.0f} GB/s "
                    f"({gbps / copy_gbps:.0%} of copy)"
                )
        for variant in variants:
            name = str(module.variant_name(variant))
            outputs[0].fill_(float("nan"))
            if not module.run_variant(*arguments[0], outputs[0], variant, False):
                print(f"  variant {variant}: does not apply")
                continue
            torch.cuda.synchronize()
            problem = mismatch(outputs[0], expected, tolerance.atol, tolerance.rtol)
            for _ in range(args.calls):
                module.run_variant(*arguments[1 % sets], outputs[1 % sets], variant, False)
            torch.cuda.synchronize()
            if problem:
                print(f"  variant {variant}: WRONG {problem}")
                continue
            if args.no_time:
                print(f"  variant {variant}: correct")
                continue
            us = graph_time_us(
                [
                    (
                        lambda i=i: module.run_variant(
                            *arguments[i % sets], outputs[i % sets], variant, False
                        )
                    )
                    for i in range(20)
                ],
                device,
            )
            print(f"  variant {variant}: {us:7.2f} us, {light_us / us:5.1%} of light  ({name})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
