"""Development aid for the CUDA nvfp4_gemv on a GPU: each compiled variant run explicitly on one
shape (checked against the reference, then timed as CUDA graph replays over input sets 3x the L2),
beside a bare streaming-read kernel over the same bytes (the memory side's ceiling for this
traffic), so that a variant's gap splits into memory and decode. Run under ncu with ``--calls``
to profile: ``ncu -k regex:gemv_ python benchmarks/probes/probe_nvfp4.py --calls 2 --no-time``.

Experiments in the same run: ``--patterns`` times the whole-row kernel's loads alone (no decode);
``--patch NAME`` rebuilds the solution with one of PATCHES (a text replacement: a step left out, a
ring depth changed) and times each variant of it beside the unpatched one; ``--baseline DIR`` does
the same for another copy of the sources (e.g. an earlier commit's, from ``git show``).

    python benchmarks/probes/probe_nvfp4.py [--shape M,K,L ...] [--variants 0,2,7] [--calls N] [--no-time]
        [--patterns [--orders 0,1,2,3] [--slices S] [--modes 0,1]] [--patch NAME ...] [--baseline DIR]
"""

# ruff: noqa: B023  (the lambdas are captured into a graph before the loop moves on)
from __future__ import annotations

import argparse
import itertools
import math
import sys
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from benchmarks.bench_nvfp4_gemv import INPUTS, bytes_moved, mismatch

from kernelarena.evaluate.judge.ceilings import measure_ceilings
from kernelarena.evaluate.sandbox.graph_timing import time_cuda_graph
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

// The whole-row kernel's memory traffic alone (no decode): A as rows of row_bytes, units of one
// step of a group of kRows rows (kChunks 16-byte chunks a lane and row, 512 bytes apart), loaded
// through a kDepth-step register ring. Scales (sfa, rows of row_bytes / 8): mode 0 none; 1 two
// bytes a lane, row and chunk (as the kernel does). Units, numbered group-major (a group's steps
// are consecutive), go to warps in one of three orders: 0, each warp a contiguous range (to within
// one unit; the whole-row kernel's order); 1, round robin over all warps of the grid (warps at work
// at once read neighbouring units); 2, blocks take tiles of whole groups round robin (at least 8
// units a tile), the block's warps a tile's units round robin (what a kernel that sums a row
// inside one block could do; a last partial tile is left out); 3, teams of ``slices`` warps take
// whole groups round robin over the grid's teams, each warp of a team one slice of a group's
// steps (the whole-row kernel's split, its groups strided instead of contiguous; steps must be a
// multiple of slices).
template <int kRows, int kChunks, int kDepth>
__global__ void __launch_bounds__(256, 2) pattern_kernel(const uint8_t* a, const uint8_t* sfa, uint32_t rows,
                                                         uint32_t row_bytes, int mode, int order, uint32_t slices,
                                                         uint32_t* sink) {
  const uint32_t steps = row_bytes / (512 * kChunks), groups = rows / kRows;
  const uint32_t block_warps = blockDim.x / 32, warp_in_block = threadIdx.x / 32;
  const uint32_t warps = gridDim.x * block_warps, warp = blockIdx.x * block_warps + warp_in_block;
  const uint32_t lane = threadIdx.x & 31;
  const uint32_t total = groups * steps;
  const uint32_t tile_groups = steps >= block_warps ? 1 : (block_warps + steps - 1) / steps;
  const uint32_t tile_units = tile_groups * steps, tiles = total / tile_units;
  const uint32_t per_tile = (tile_units - warp_in_block + block_warps - 1) / block_warps;
  const uint32_t teams = warps / slices, team = warp / slices, slice_steps = steps / slices;
  uint32_t count = 0, lo = 0;
  if (order == 0) {
    lo = uint32_t(uint64_t(total) * warp / warps);
    count = uint32_t(uint64_t(total) * (warp + 1) / warps) - lo;
  } else if (order == 1) {
    count = warp < total ? (total - warp + warps - 1) / warps : 0;
  } else if (order == 3) {
    count = team < groups ? (groups - team + teams - 1) / teams * slice_steps : 0;
  } else {
    const uint32_t block_tiles = blockIdx.x < tiles ? (tiles - blockIdx.x + gridDim.x - 1) / gridDim.x : 0;
    count = block_tiles * per_tile;
  }
  auto unit_of = [&](uint32_t i) -> uint32_t {
    if (order == 0) return lo + i;
    if (order == 1) return warp + i * warps;
    if (order == 3) {
      const uint32_t group = team + (i / slice_steps) * teams;
      return group * steps + (warp % slices) * slice_steps + i % slice_steps;
    }
    const uint32_t tile = blockIdx.x + (i / per_tile) * gridDim.x;
    return tile * tile_units + warp_in_block + (i % per_tile) * block_warps;
  };
  uint32_t mixed = 0;
  uint4 ring[kDepth][kRows][kChunks];
  uint32_t scales[kDepth][kRows];
  auto load = [&](int d, uint32_t i) {
    const uint32_t unit = unit_of(i);
    const uint32_t group = unit / steps, step = unit % steps;
#pragma unroll
    for (int r = 0; r < kRows; ++r) {
      const uint64_t row = group * kRows + r;
      const uint8_t* at = a + row * row_bytes + step * 512 * kChunks + lane * 16;
#pragma unroll
      for (int c = 0; c < kChunks; ++c) {
        asm volatile("ld.global.nc.L1::no_allocate.v4.u32 {%0, %1, %2, %3}, [%4];"
                     : "=r"(ring[d][r][c].x), "=r"(ring[d][r][c].y), "=r"(ring[d][r][c].z), "=r"(ring[d][r][c].w)
                     : "l"(at + c * 512));
      }
      const uint8_t* s_row = sfa + row * (row_bytes / 8);
      scales[d][r] = 0;
      if (mode == 1) {
#pragma unroll
        for (int c = 0; c < kChunks; ++c) {
          uint32_t v;
          asm volatile("ld.global.nc.u16 %0, [%1];" : "=r"(v) : "l"(s_row + (step * kChunks + c) * 64 + lane * 2));
          scales[d][r] ^= v;
        }
      }
    }
  };
  auto use = [&](int d) {
#pragma unroll
    for (int r = 0; r < kRows; ++r) {
#pragma unroll
      for (int c = 0; c < kChunks; ++c) mixed ^= ring[d][r][c].x ^ ring[d][r][c].y ^ ring[d][r][c].z ^ ring[d][r][c].w;
      mixed ^= scales[d][r];
    }
  };
  uint32_t i = 0;
#pragma unroll
  for (int d = 0; d < kDepth; ++d) {
    if (uint32_t(d) < count) load(d, d);
  }
  for (; i < count; i += kDepth) {
#pragma unroll
    for (int d = 0; d < kDepth; ++d) {
      if (i + d < count) {
        use(d);
        if (i + d + kDepth < count) load(d, i + d + kDepth);
      }
    }
  }
  if (mixed == 0x9E3779B9u) sink[0] = mixed;
}

void read_pattern(tvm::ffi::TensorView a, tvm::ffi::TensorView sfa, int64_t rows, int64_t row_bytes, int64_t kind,
                  int64_t mode, int64_t order, int64_t slices, tvm::ffi::TensorView sink,
                  int64_t blocks) {
  auto stream = static_cast<cudaStream_t>(TVMFFIEnvGetStream(a.device().device_type, a.device().device_id));
  const auto* a_ptr = static_cast<const uint8_t*>(a.data_ptr());
  const auto* s_ptr = static_cast<const uint8_t*>(sfa.data_ptr());
  auto* out = static_cast<uint32_t*>(sink.data_ptr());
  auto kernel = kind == 0 ? pattern_kernel<4, 1, 3>
                : kind == 1 ? pattern_kernel<1, 4, 3>
                : kind == 2 ? pattern_kernel<4, 1, 2>
                            : pattern_kernel<2, 1, 6>;
  kernel<<<blocks, 256, 0, stream>>>(a_ptr, s_ptr, rows, row_bytes, int(mode), int(order),
                                     uint32_t(slices), out);
}

void read_only(tvm::ffi::TensorView data, tvm::ffi::TensorView sink, int64_t blocks, int64_t threads) {
  auto stream = static_cast<cudaStream_t>(TVMFFIEnvGetStream(data.device().device_type, data.device().device_id));
  const int64_t count = data.size(0) / 16;
  read_kernel<<<blocks, threads, 0, stream>>>(static_cast<const uint4*>(data.data_ptr()), count,
                                              static_cast<uint32_t*>(sink.data_ptr()));
}
"""


# The pattern kernel's unit orders (--orders), as in its comment.
ORDERS = {
    0: "warp ranges",
    1: "grid round robin",
    2: "block tiles round robin",
    3: "team groups round robin",
}

# Experiments on the whole-row kernel (--patch NAME): its sources rebuilt with a text replacement,
# timed beside the library's build (results unchecked: they are wrong on purpose).
ROWS_SOURCE = "nvfp4_gemv_rows.cuh"
TUNER_SOURCE = "nvfp4_gemv_tuner.cuh"
_V7_SPEC = '{Kind::kRows, 2, 2, "whole rows: groups of 4 rows, 2-step register ring'
_V8_SPEC = '{Kind::kRows, 4, 2, "whole rows: groups of 2 rows, 4-step register ring'
_V9_SPEC = '{Kind::kRows, 6, 2, "whole rows: 1 row x 2 chunks a step'
_CARVEOUT_MAX_SHARED = (
    "cudaFuncSetAttribute(kernel, cudaFuncAttributePreferredSharedMemoryCarveout, "
    "cudaSharedmemCarveoutMaxShared);"
)
_DOT_LINES = (
    "int first = dot8(a.x, low.x, low.y, static_cast<int>(blocks.x), positive, negative);",
    "first = dot8(a.y, low.z, low.w, first, positive, negative);",
    "int second = dot8(a.z, high.x, high.y, static_cast<int>(blocks.y), positive, negative);",
    "second = dot8(a.w, high.z, high.w, second, positive, negative);",
)
PATCHES: dict[str, list[tuple[str, str, str]]] = {
    # the vector not decoded (shared memory left as it is), the block barrier kept
    "no_vector": [
        (
            ROWS_SOURCE,
            "decode_vector_to_shared(p, batch, padded_chunks, first_vector_chunk, positive, negative, vector);",
            "",
        )
    ],
    # neither the vector nor the barrier before the main loop
    "no_vector_no_barrier": [
        (
            ROWS_SOURCE,
            "decode_vector_to_shared(p, batch, padded_chunks, first_vector_chunk, positive, negative, vector);\n"
            "  __syncthreads();",
            "",
        )
    ],
    # the dot products replaced by an XOR of the words (loads, vector reads and scales kept)
    "no_dot": [
        (ROWS_SOURCE, _DOT_LINES[0], "int first = static_cast<int>(a.x ^ a.y ^ low.x ^ blocks.x);"),
        (ROWS_SOURCE, _DOT_LINES[1], ""),
        (
            ROWS_SOURCE,
            _DOT_LINES[2],
            "int second = static_cast<int>(a.z ^ a.w ^ high.x ^ blocks.y);",
        ),
        (ROWS_SOURCE, _DOT_LINES[3], ""),
    ],
    # the whole-row variants' register rings at other depths (and blocks an SM): v7 4 rows, v8 2 rows,
    # v9 1 row x 2 chunks a step
    **{
        f"v{variant}_ring_{depth}{'_3blocks' if blocks == 3 else ''}": [
            (TUNER_SOURCE, spec, spec.replace(old, f"kRows, {depth}, {blocks}"))
        ]
        for variant, spec, old in (
            (7, _V7_SPEC, "kRows, 2, 2"),
            (8, _V8_SPEC, "kRows, 4, 2"),
            (9, _V9_SPEC, "kRows, 6, 2"),
        )
        for depth in (1, 2, 3, 4, 6)
        for blocks in (2, 3)
    },
    # the shared-memory carveout at what 2 blocks need (L1 gets the rest) instead of the maximum
    "carveout_fit": [
        (
            TUNER_SOURCE,
            _CARVEOUT_MAX_SHARED,
            "cudaFuncSetAttribute(kernel, cudaFuncAttributePreferredSharedMemoryCarveout, "
            "static_cast<int>(std::min<size_t>(100, (2 * (shared_bytes + 1024) * 100 + 233471) / 233472)));",
        )
    ],
    # the carveout preference at the most L1 (the driver still grants what the launch needs)
    "carveout_l1": [
        (
            TUNER_SOURCE,
            _CARVEOUT_MAX_SHARED,
            "cudaFuncSetAttribute(kernel, cudaFuncAttributePreferredSharedMemoryCarveout, "
            "cudaSharedmemCarveoutMaxL1);",
        )
    ],
}


def build_patched(name: str, solution_dir: Path) -> object:
    """The CUDA solution's sources (from ``solution_dir``) with PATCHES[name] applied, if any,
    compiled and loaded."""
    import tempfile

    import tvm_ffi.cpp

    from kernelarena.compile.cuda import CUDA_FLAGS

    folder = Path(tempfile.mkdtemp(prefix=f"probe_{name}_"))
    for source in solution_dir.iterdir():
        text = source.read_text()
        for file_name, old, new in PATCHES.get(name, []):
            if file_name != source.name:
                continue
            if old not in text:
                raise SystemExit(f"--patch {name}: {old[:60]!r} not found in {file_name}")
            text = text.replace(old, new)
        (folder / source.name).write_text(text)
    return tvm_ffi.cpp.load(
        f"probe_{name}",
        cuda_files=[str(folder / "nvfp4_gemv.cu")],
        extra_cuda_cflags=list(CUDA_FLAGS),
        extra_include_paths=[str(folder)],
        build_directory=str(folder),
    )


GRAPH_CALLS = 20


def graph_time_us(call: Callable[[int], object], device: torch.device) -> float:
    """Median us per call of one CUDA graph holding call(0) .. call(GRAPH_CALLS - 1)."""
    timing = time_cuda_graph(call, device, calls_per_graph=GRAPH_CALLS)
    return timing.median_ms * 1e3


def int_list(text: str) -> list[int]:
    """A comma-separated list of integers (an argparse type)."""
    return [int(x) for x in text.split(",")]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--shape", action="append", default=None, help="M,K,L (repeatable)")
    parser.add_argument(
        "--variants", type=int_list, default=[], help="comma-separated (default: all)"
    )
    parser.add_argument("--calls", type=int, default=0, help="plain calls per variant (for ncu)")
    parser.add_argument("--no-time", action="store_true")
    parser.add_argument("--generator", default="gpumode")
    parser.add_argument("--patch", action="append", default=[], choices=sorted(PATCHES))
    parser.add_argument(
        "--baseline",
        type=Path,
        default=None,
        help="a folder of the solution's sources to time beside",
    )
    parser.add_argument(
        "--patterns", action="store_true", help="also time the whole-row kernel's loads alone"
    )
    parser.add_argument(
        "--orders",
        type=int_list,
        default=[0],
        help="the patterns' unit orders (comma-separated, see ORDERS)",
    )
    parser.add_argument(
        "--slices", type=int, default=1, help="order 3: warps a team (a power of 2 <= 8)"
    )
    parser.add_argument(
        "--modes",
        type=int_list,
        default=[0, 1],
        help="the patterns' scale modes: 0 none, 1 two bytes a lane",
    )
    args = parser.parse_args()
    shapes = [tuple(int(x) for x in s.split(",")) for s in (args.shape or ["7168,16384,1"])]
    device = torch.device("cuda")
    module = build("nvfp4_gemv", "cuda", "cuda").metadata["module"]
    solution_dir = Path(__file__).resolve().parents[2] / "src/kernelarena/library/nvfp4_gemv/cuda"
    builds = {name: solution_dir for name in args.patch}
    if args.baseline is not None:
        builds["baseline"] = args.baseline.resolve()  # PATCHES has no entry of that name
    with ThreadPoolExecutor(max_workers=8) as pool:  # nvcc runs outside the GIL
        futures = {
            name: pool.submit(build_patched, name, folder) for name, folder in builds.items()
        }
        patched = {name: future.result() for name, future in futures.items()}
    variants = args.variants or list(range(module.variant_count()))
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
            "probe_read", cuda_sources=READ_SOURCE, functions=["read_only", "read_pattern"]
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
            for blocks_per_sm, threads in ((2, 512), (4, 512), (2, 256)):
                us = graph_time_us(
                    lambda i: reader.read_only(
                        a_only[i % sets], sink, blocks_per_sm * sms, threads
                    ),
                    device,
                )
                gbps = a_only[0].numel() / us / 1e3
                print(
                    f"  bare read of A ({blocks_per_sm} blocks of {threads}/SM): {us:7.2f} us, "
                    f"{gbps:6.0f} GB/s ({gbps / copy_gbps:.0%} of copy)"
                )
            if args.patterns:
                sfa_only = [d["sfa"].view(torch.uint8).reshape(-1) for d in made]
                for kind, label in (
                    (0, "4 rows x 512 B a step, 3 deep"),
                    (1, "1 row x 2 KB a step, 3 deep"),
                    (2, "4 rows x 512 B a step, 2 deep"),
                    (3, "2 rows x 512 B a step, 6 deep"),
                ):
                    if k // 2 % (512 * (4 if kind == 1 else 1)):
                        continue
                    for order, mode in itertools.product(args.orders, args.modes):
                        us = graph_time_us(
                            lambda i: reader.read_pattern(
                                a_only[i % sets],
                                sfa_only[i % sets],
                                m * batches,
                                k // 2,
                                kind,
                                mode,
                                order,
                                args.slices,
                                sink,
                                2 * sms,
                            ),
                            device,
                        )
                        moved = a_only[0].numel() + (sfa_only[0].numel() if mode else 0)
                        gbps = moved / us / 1e3
                        scales = "scales 2 B a lane" if mode else "no scales"
                        print(
                            f"  pattern {label}, {scales}, {ORDERS[order]}: {us:7.2f} us, "
                            f"{gbps:6.0f} GB/s ({gbps / copy_gbps:.0%} of copy)"
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

            def variant_us(built: Any) -> float:
                return graph_time_us(
                    lambda i: built.run_variant(
                        *arguments[i % sets], outputs[i % sets], variant, False
                    ),
                    device,
                )

            us = variant_us(module)
            print(f"  variant {variant}: {us:7.2f} us, {light_us / us:5.1%} of light  ({name})")
            for patch, patched_module in patched.items():
                if patch[0] == "v" and not patch.startswith(f"v{variant}_"):
                    continue  # a variant's own patch
                us = variant_us(patched_module)
                print(
                    f"    patched {patch}: {us:7.2f} us, {light_us / us:5.1%} of light (unchecked)"
                )
    return 0


if __name__ == "__main__":
    sys.exit(main())
