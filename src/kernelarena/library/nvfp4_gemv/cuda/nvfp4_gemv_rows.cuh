// The whole-row NVFP4 GEMV kernel (see nvfp4_gemv.cu for the design and why it exists): each warp
// owns a contiguous range of row groups (and one slice of k) and sweeps it alone, the vector decoded
// once per block into shared memory, A and sfa loaded into a register ring a few steps ahead.
//
// Words: a "group" is kRows consecutive rows starting on a multiple of kRows; a "step" is kChunks
// chunks (16 bytes, 32 values each, 512 bytes apart) a lane of each row of a group, so a warp-wide
// step covers 512 * kChunks bytes of each row. A "slice" is the k_slices-th part of a row's chunks,
// padded to a whole number of steps; the padding meets a zero vector and zero scales.
#pragma once

#include "nvfp4_gemv_details.cuh"

namespace nvfp4_gemv {

// A chunk of the vector and its scale pair as loaded (zeros past the row).
struct VectorChunk {
  uint4 raw;
  uint32_t scales;
};

__device__ __forceinline__ VectorChunk load_vector_chunk(const Params& p, int64_t batch, uint32_t chunk) {
  VectorChunk loaded{make_uint4(0, 0, 0, 0), 0};
  if (chunk < static_cast<uint32_t>(p.chunks)) {
    loaded.raw = __ldg(reinterpret_cast<const uint4*>(p.b + batch * p.b_batch + chunk * kChunkBytes));
    loaded.scales = load_scale_pair(p.sfb + batch * p.sfb_layout.batch + p.sfb_layout.column(2 * chunk), true);
  }
  return loaded;
}

// The vector of one batch, decoded by the whole block into shared memory; ``first`` is chunk
// threadIdx.x, loaded by the caller ahead of its other loads.
__device__ __forceinline__ void decode_vector_to_shared(const Params& p, int64_t batch, uint32_t padded_chunks,
                                                        const VectorChunk& first, uint32_t positive,
                                                        uint32_t negative, const SharedVector& v) {
  if (threadIdx.x < padded_chunks) store_vector_chunk(first.raw, first.scales, threadIdx.x, positive, negative, v);
  for (uint32_t chunk = threadIdx.x + blockDim.x; chunk < padded_chunks; chunk += blockDim.x) {
    const VectorChunk loaded = load_vector_chunk(p, batch, chunk);
    store_vector_chunk(loaded.raw, loaded.scales, chunk, positive, negative, v);
  }
}

// One step of a group's kRows rows in registers: kChunks chunks of A (512 bytes apart) and their
// scale pairs a row.
template <int kRows, int kChunks>
struct Step {
  uint4 a[kRows][kChunks];
  uint32_t s[kRows][kChunks];
};

// The scale pair into a 32-bit register, 0 when not used (a row past the warp's range or a chunk
// past the row: their products are dropped or meet zero scales, and 0 * a stale NaN would not be 0).
__device__ __forceinline__ uint32_t load_scale_pair_u32(const uint8_t* p, bool use) {
  uint32_t v;
  asm("{\n"
      ".reg .pred use;\n"
      "setp.ne.b32 use, %2, 0;\n"
      "mov.b32 %0, 0;\n"
      "@use ld.global.nc.u16 %0, [%1];\n"
      "}"
      : "=r"(v)
      : "l"(p), "r"(static_cast<int>(use)));
  return v;
}

template <int kRows, int kChunks, int kDepth, int kMinBlocks>
__global__ void __launch_bounds__(kMaxThreads, kMinBlocks) gemv_rows_kernel(const Params p) {
  constexpr int kLog2Rows = log2_rows<kRows>();
  extern __shared__ uint4 shared[];

  const uint32_t slices = static_cast<uint32_t>(p.k_slices);
  const uint32_t slice_chunks = static_cast<uint32_t>(p.slice_chunks);  // a multiple of 32 kChunks
  const uint32_t padded_chunks = slices * slice_chunks;
  const SharedVector vector(shared, padded_chunks);

  const uint32_t zero = opaque_zero(p.m);
  const uint32_t positive = kPositiveLow + zero;
  const uint32_t negative = kNegativeLow + zero;

  const uint32_t blocks_per_batch = static_cast<uint32_t>(p.blocks_per_batch);
  const int64_t batch = blockIdx.x / blocks_per_batch;
  const uint32_t part = blockIdx.x % blocks_per_batch;
  // The vector's first chunks are asked for before A: behind the ring's loads in the memory
  // queues they would arrive last and hold every warp back.
  const VectorChunk first_vector_chunk = load_vector_chunk(p, batch, threadIdx.x);

  // Rows go in groups of kRows that start on a multiple of kRows (so a group never straddles a
  // 32-row block of the permuted scale layout): the block's groups [lo, hi) of the batch's
  // ceil(m / kRows), its warps' teams of ``slices`` warps, this warp's groups and slice.
  const uint32_t batch_groups = (p.m + kRows - 1) / kRows;
  const uint32_t lo = static_cast<uint32_t>(uint64_t(batch_groups) * part / blocks_per_batch);
  const uint32_t hi = static_cast<uint32_t>(uint64_t(batch_groups) * (part + 1) / blocks_per_batch);
  const uint32_t lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const uint32_t teams = (blockDim.x >> 5) / slices;
  const uint32_t team = warp / slices, slice = warp % slices;
  const uint32_t team_lo = lo + (hi - lo) * team / teams;
  const uint32_t team_hi = lo + (hi - lo) * (team + 1) / teams;
  const uint32_t steps = slice_chunks / (32 * kChunks);
  constexpr uint32_t kStepChunks = 32 * kChunks;
  const uint32_t units = (team_hi - team_lo) * steps;

  const uint32_t first_chunk = slice * slice_chunks + lane;  // this lane's chunk at step 0
  const uint8_t* a_lane = p.a + batch * p.a_batch + first_chunk * kChunkBytes;
  const uint8_t* s_lane = p.sfa + batch * p.sfa_layout.batch + p.sfa_layout.column(2 * first_chunk);
  const uint32_t s_step = 16 * p.sfa_layout.c_rest;  // 32 chunks = 64 scales = 16 groups of 4
  const uint32_t chunks = static_cast<uint32_t>(p.chunks);

  // The next load: its step and group, and the group's first row's addresses at step 0 (offsets
  // within a batch are 32-bit: the host checks). Row r of a group is r rows further in A and
  // r * r32 bytes further in the scales (same 32-row block in both layouts).
  uint32_t load_step_index = 0, load_row0 = team_lo * kRows;
  const uint8_t* load_a = a_lane + load_row0 * p.a_row;
  const uint8_t* load_s = s_lane + p.sfa_layout.row(load_row0);
  auto load_step = [&](Step<kRows, kChunks>& into) {
    const uint32_t chunk0 = first_chunk + kStepChunks * load_step_index;
    const uint8_t* a_at = load_a + load_step_index * kStepChunks * kChunkBytes;
    const uint8_t* s_at = load_s + load_step_index * kChunks * s_step;
#pragma unroll
    for (int r = 0; r < kRows; ++r) {
      const bool row_ok = load_row0 + r < p.m;
#pragma unroll
      for (int c = 0; c < kChunks; ++c) {
        const bool use = row_ok && chunk0 + 32 * c < chunks;
        into.a[r][c] = load_streaming(a_at + r * p.a_row + c * 32 * kChunkBytes, use);
        into.s[r][c] = load_scale_pair_u32(s_at + r * p.sfa_layout.r32 + c * s_step, use);
      }
    }
    if (++load_step_index == steps) {
      load_step_index = 0;
      load_row0 += kRows;
      load_a = a_lane + load_row0 * p.a_row;
      load_s = s_lane + p.sfa_layout.row(load_row0);
    }
  };

  Step<kRows, kChunks> ring[kDepth];
#pragma unroll
  for (int d = 0; d < kDepth; ++d) ring[d] = Step<kRows, kChunks>{};
#pragma unroll
  for (int d = 0; d < kDepth; ++d) {
    if (d < static_cast<int>(units)) load_step(ring[d]);
  }
  decode_vector_to_shared(p, batch, padded_chunks, first_vector_chunk, positive, negative, vector);
  __syncthreads();

  float acc[kRows] = {};
  uint32_t step = 0, row0 = team_lo * kRows;
  // The vector's arrays are padded_chunks entries apart: one address a step, the rest offsets.
  const uint32_t high_offset = padded_chunks * 16, blocks_offset = padded_chunks * 32;
  const char* vector_lane = reinterpret_cast<const char*>(vector.low) + first_chunk * 16;
  const char* unmagic_lane = reinterpret_cast<const char*>(vector.unmagic) + first_chunk * 8;
  auto decode_step = [&](const Step<kRows, kChunks>& in) {
#pragma unroll
    for (int c = 0; c < kChunks; ++c) {
      const char* at = vector_lane + (step * kChunks + c) * 32 * 16;
      const uint4 low = *reinterpret_cast<const uint4*>(at);
      const uint4 high = *reinterpret_cast<const uint4*>(at + high_offset);
      const uint4 blocks = *reinterpret_cast<const uint4*>(at + blocks_offset);
      const uint2 unmagic = *reinterpret_cast<const uint2*>(unmagic_lane + (step * kChunks + c) * 32 * 8);
#pragma unroll
      for (int r = 0; r < kRows; ++r) {
        const uint4 a = in.a[r][c];
        int first = dot8(a.x, low.x, low.y, static_cast<int>(blocks.x), positive, negative);
        first = dot8(a.y, low.z, low.w, first, positive, negative);
        int second = dot8(a.z, high.x, high.y, static_cast<int>(blocks.y), positive, negative);
        second = dot8(a.w, high.z, high.w, second, positive, negative);
        const float2 sfa = e4m3x2_to_float2(in.s[r][c]);
        acc[r] = fmaf(fmaf(__int_as_float(first), __uint_as_float(blocks.z), __uint_as_float(unmagic.x)), sfa.x,
                      acc[r]);
        acc[r] = fmaf(fmaf(__int_as_float(second), __uint_as_float(blocks.w), __uint_as_float(unmagic.y)), sfa.y,
                      acc[r]);
      }
    }
    if (++step == steps) {  // the group is summed: one row total a lane, written by its first lane
      const float total = transpose_reduce<kRows>(acc, static_cast<int>(lane));
      const uint32_t row = row0 + ((lane >> (5 - kLog2Rows)) & (kRows - 1));
      if ((lane & ((32 >> kLog2Rows) - 1)) == 0 && row < p.m) {
        if (slices == 1) {
          store_row(p, batch, row, total);
        } else {
          vector.partial[slice * p.rows_cap + (row - lo * kRows)] = total;
        }
      }
#pragma unroll
      for (int r = 0; r < kRows; ++r) acc[r] = 0.0f;
      step = 0;
      row0 += kRows;
    }
  };

  uint32_t unit = 0;
#pragma unroll 1
  for (; unit + 2 * kDepth <= units; unit += kDepth) {  // every slot refilled
#pragma unroll
    for (int d = 0; d < kDepth; ++d) {
      decode_step(ring[d]);
      load_step(ring[d]);
    }
  }
#pragma unroll 1
  for (; unit < units; unit += kDepth) {
#pragma unroll
    for (int d = 0; d < kDepth; ++d) {
      if (unit + d < units) {
        decode_step(ring[d]);
        if (unit + d + kDepth < units) load_step(ring[d]);
      }
    }
  }

  if (slices > 1) {  // the slices' partial sums, added in slice order (deterministic)
    __syncthreads();
    const uint32_t first_row = lo * kRows, rows = min(hi * kRows, p.m) - first_row;
    for (uint32_t i = threadIdx.x; i < rows; i += blockDim.x) {
      float sum = 0.0f;
      for (uint32_t s = 0; s < slices; ++s) sum += vector.partial[s * p.rows_cap + i];
      store_row(p, batch, first_row + i, sum);
    }
  }
}

}  // namespace nvfp4_gemv
