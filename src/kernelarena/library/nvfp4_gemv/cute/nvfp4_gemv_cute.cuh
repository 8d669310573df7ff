// Device code of the CuTe NVFP4 GEMV (host side in nvfp4_gemv_cute.cu): the whole-row algorithm of
// the CUDA solution's variant 7 (cuda/nvfp4_gemv_rows.cuh), with A, its scales, the vector and c as
// CuTe tensors, a warp's rows cut out by local_tile, and A moved into a register ring by a CuTe
// copy atom for 16-byte streaming loads (ld.global.nc.L1::no_allocate).
//
// - A warp owns groups of kRows consecutive rows (a range of them, balanced over the block's
//   warps) and one slice of k; each lane takes one 16-byte chunk (32 values) of each row a step,
//   so a warp-wide step reads 512 bytes of each of the group's rows. 1-8 warps share a row (k
//   slices) when a warp would otherwise get fewer than 2 groups; their sums meet in shared memory.
// - The vector b is decoded once per block into shared memory: int8 2b (PRMT lookups), the dp4a
//   start value and sfb / 4 per 16-value block (56 bytes a chunk, lane-contiguous).
// - Decode of A: PRMT turns 4 FP4 codes into 12 + 2a (non-negative codes) and 12 - 2|a| (negative
//   ones) bytes, dp4a multiplies by 2b and sums exactly in int32; started at magic - 12 sum(2b),
//   the int32's bits are the float 12582912 + sum(2a 2b), so two FMAs apply sfb / 4 and sfa.
// - Out: a transposed butterfly (kRows partial sums a lane -> one row a lane).
#pragma once

#include <cuda_fp16.h>
#include <cuda_fp8.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <cute/tensor.hpp>

namespace nvfp4_gemv_cute {

using cute::uint128_t;

constexpr int kWarps = 8;
constexpr int kThreads = 32 * kWarps;
constexpr int kRows = 4;   // rows a group
constexpr int kDepth = 2;  // steps in flight (register ring)

// PRMT tables, byte c for codes c = 0-7: 12 + 2 e2m1(c) and 12 - 2 e2m1(c); every byte < 0x80, so
// the sign-replicate selectors (nibble >= 8) give 0.
constexpr uint32_t kPositiveLow = 0x0F0E0D0Cu;
constexpr uint32_t kPositiveHigh = 0x18141210u;
constexpr uint32_t kNegativeLow = 0x090A0B0Cu;
constexpr uint32_t kNegativeHigh = 0x00040608u;
constexpr uint32_t kSignBits = 0x88888888u;
constexpr int kMagicBits = 0x4B400000;  // 1.5 * 2^23: int32 n added reads as the float 12582912 + n
constexpr float kMagic = 12582912.0f;

// 16 bytes read once: no L1 allocation. A CuTe copy operation, so copy_if predicates it per row.
struct StreamingCopy {
  using SRegisters = uint128_t[1];
  using DRegisters = uint128_t[1];
  CUTE_DEVICE static void copy(uint128_t const& src, uint128_t& dst) {
    uint32_t* d = reinterpret_cast<uint32_t*>(&dst);
    asm volatile("ld.global.nc.L1::no_allocate.v4.u32 {%0, %1, %2, %3}, [%4];\n"
                 : "=r"(d[0]), "=r"(d[1]), "=r"(d[2]), "=r"(d[3])
                 : "l"(&src));
  }
};

}  // namespace nvfp4_gemv_cute

namespace cute {
template <>
struct Copy_Traits<nvfp4_gemv_cute::StreamingCopy> : Copy_Traits<UniversalCopy<uint128_t>> {};
}  // namespace cute

namespace nvfp4_gemv_cute {

using namespace cute;

struct Params {
  const uint128_t* a;    // [l][m][chunks] 16-byte chunks
  const uint128_t* b;    // row 0 of each batch
  const uint16_t* sfa;   // scale pairs: [l][m][chunks]
  const uint16_t* sfb;
  __half* c;
  int32_t m, chunks;
  int64_t a_row, a_batch, b_batch;        // in chunks
  int64_t sfa_row, sfa_batch, sfb_batch;  // in pairs
  int64_t c_row, c_batch;                 // in elements
  int32_t slices, slice_chunks, blocks_per_batch, rows_cap;
};

__device__ __forceinline__ uint32_t prmt(uint32_t low, uint32_t high, uint32_t selector) {
  uint32_t out;
  asm("prmt.b32 %0, %1, %2, %3;" : "=r"(out) : "r"(low), "r"(high), "r"(selector));
  return out;
}

__device__ __forceinline__ int dot8(uint32_t x, uint32_t b_low, uint32_t b_high, int acc, uint32_t positive,
                                    uint32_t negative) {
  const uint32_t flipped = x ^ kSignBits;
  acc = __dp4a(static_cast<int>(prmt(positive, kPositiveHigh, x)), static_cast<int>(b_low), acc);
  acc = __dp4a(static_cast<int>(prmt(negative, kNegativeHigh, flipped)), static_cast<int>(b_low), acc);
  acc = __dp4a(static_cast<int>(prmt(positive, kPositiveHigh, x >> 16)), static_cast<int>(b_high), acc);
  acc = __dp4a(static_cast<int>(prmt(negative, kNegativeHigh, flipped >> 16)), static_cast<int>(b_high), acc);
  return acc;
}

// 8 values of the vector -> int8 bytes of 2b (values 0-3 in low, 4-7 in high).
__device__ __forceinline__ void decode_vector_word(uint32_t x, uint32_t& low, uint32_t& high) {
  const uint32_t flipped = x ^ kSignBits;
  const uint32_t offset_low = prmt(kPositiveLow, kPositiveHigh, x) | prmt(kNegativeLow, kNegativeHigh, flipped);
  const uint32_t offset_high =
      prmt(kPositiveLow, kPositiveHigh, x >> 16) | prmt(kNegativeLow, kNegativeHigh, flipped >> 16);
  // Bytes 12 + 2b in [0, 24]: (byte | 0x80) - 12 never borrows; flipping the top bit gives int8 2b.
  low = ((offset_low | 0x80808080u) - 0x0C0C0C0Cu) ^ 0x80808080u;
  high = ((offset_high | 0x80808080u) - 0x0C0C0C0Cu) ^ 0x80808080u;
}

__device__ __forceinline__ float2 e4m3x2_to_float2(uint32_t bits) {
  const __half2_raw raw = __nv_cvt_fp8x2_to_halfraw2(static_cast<__nv_fp8x2_storage_t>(bits & 0xFFFF), __NV_E4M3);
  return __half22float2(__half2(raw));
}

// The decoded vector in shared memory, per chunk of the padded row: 2b of values 0-15 and 16-31,
// (start, start, sfb / 4, sfb / 4) of its two blocks, and the two -magic sfb / 4; then the slices'
// partial sums of the block's rows.
struct SharedVector {
  uint4* low;
  uint4* high;
  uint4* blocks;
  uint2* unmagic;
  float* partial;
  __device__ __forceinline__ SharedVector(uint4* base, uint32_t padded) {
    low = base;
    high = base + padded;
    blocks = base + 2 * padded;
    unmagic = reinterpret_cast<uint2*>(base + 3 * padded);
    partial = reinterpret_cast<float*>(unmagic + padded);
  }
};

inline size_t shared_bytes(uint32_t padded, uint32_t slices, uint32_t rows_cap) {
  return size_t(padded) * (3 * 16 + 8) + (slices > 1 ? size_t(slices) * rows_cap * 4 : 0);
}

template <class VectorTensor, class ScaleTensor>
__device__ __forceinline__ void decode_vector(const VectorTensor& gB, const ScaleTensor& gSB, int chunks,
                                              uint32_t padded, const SharedVector& v) {
  for (uint32_t chunk = threadIdx.x; chunk < padded; chunk += blockDim.x) {
    uint4 raw = make_uint4(0, 0, 0, 0);
    uint32_t scales = 0;
    if (chunk < static_cast<uint32_t>(chunks)) {
      const uint128_t loaded = gB(chunk);
      raw = *reinterpret_cast<const uint4*>(&loaded);
      scales = gSB(chunk);
    }
    const uint32_t words[4] = {raw.x, raw.y, raw.z, raw.w};
    uint32_t b2[8];
#pragma unroll
    for (int w = 0; w < 4; ++w) decode_vector_word(words[w], b2[2 * w], b2[2 * w + 1]);
    const float2 sfb = e4m3x2_to_float2(scales);
    int start[2];
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      int sum = 0;
#pragma unroll
      for (int w = 0; w < 4; ++w) sum = __dp4a(static_cast<int>(b2[4 * h + w]), 0x01010101, sum);
      start[h] = kMagicBits - 12 * sum;
    }
    const float scale0 = sfb.x * 0.25f, scale1 = sfb.y * 0.25f;
    v.low[chunk] = make_uint4(b2[0], b2[1], b2[2], b2[3]);
    v.high[chunk] = make_uint4(b2[4], b2[5], b2[6], b2[7]);
    v.blocks[chunk] = make_uint4(static_cast<uint32_t>(start[0]), static_cast<uint32_t>(start[1]),
                                 __float_as_uint(scale0), __float_as_uint(scale1));
    v.unmagic[chunk] = make_uint2(__float_as_uint(-kMagic * scale0), __float_as_uint(-kMagic * scale1));
  }
}

// kRows partial sums a lane -> the total of row (lane >> 3) & 3 (halving exchanges, then a butterfly).
__device__ __forceinline__ float transpose_reduce(float (&v)[kRows], int lane) {
#pragma unroll
  for (int width = kRows, mask = 16; width > 1; width >>= 1, mask >>= 1) {
    const bool upper = (lane & mask) != 0;
#pragma unroll
    for (int i = 0; i < width / 2; ++i) {
      const float send = upper ? v[i] : v[i + width / 2];
      const float keep = upper ? v[i + width / 2] : v[i];
      v[i] = keep + __shfl_xor_sync(0xffffffffu, send, mask);
    }
  }
  float total = v[0];
#pragma unroll
  for (int mask = 16 / kRows; mask >= 1; mask >>= 1) total += __shfl_xor_sync(0xffffffffu, total, mask);
  return total;
}

__global__ void __launch_bounds__(kThreads, 2) gemv_kernel(const Params p) {
  extern __shared__ uint4 shared[];
  const uint32_t slices = static_cast<uint32_t>(p.slices);
  const uint32_t slice_chunks = static_cast<uint32_t>(p.slice_chunks);  // a multiple of 32
  const uint32_t padded = slices * slice_chunks;
  const SharedVector vector(shared, padded);

  // Always 0 ((threadIdx + 1) * m < 2^39), but ptxas cannot tell: the PRMT tables' low words stay
  // in two registers instead of being rematerialised before every PRMT.
  const uint32_t zero = static_cast<uint32_t>((uint64_t(threadIdx.x + 1) * uint32_t(p.m)) >> 50);
  const uint32_t positive = kPositiveLow + zero, negative = kNegativeLow + zero;

  const uint32_t blocks_per_batch = static_cast<uint32_t>(p.blocks_per_batch);
  const int64_t batch = blockIdx.x / blocks_per_batch;
  const uint32_t part = blockIdx.x % blocks_per_batch;

  // This batch's tensors: A and sfa (m, chunks), the vector and its scales (chunks), c (m).
  Tensor gA = make_tensor(make_gmem_ptr(p.a + batch * p.a_batch),
                          make_layout(make_shape(p.m, p.chunks), make_stride(p.a_row, Int<1>{})));
  Tensor gSA = make_tensor(make_gmem_ptr(p.sfa + batch * p.sfa_batch),
                           make_layout(make_shape(p.m, p.chunks), make_stride(p.sfa_row, Int<1>{})));
  Tensor gB = make_tensor(make_gmem_ptr(p.b + batch * p.b_batch), make_layout(p.chunks));
  Tensor gSB = make_tensor(make_gmem_ptr(p.sfb + batch * p.sfb_batch), make_layout(p.chunks));
  Tensor gC = make_tensor(make_gmem_ptr(p.c + batch * p.c_batch), make_layout(p.m, p.c_row));

  const uint32_t groups = (p.m + kRows - 1) / kRows;
  const uint32_t lo = static_cast<uint32_t>(uint64_t(groups) * part / blocks_per_batch);
  const uint32_t hi = static_cast<uint32_t>(uint64_t(groups) * (part + 1) / blocks_per_batch);
  const uint32_t lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const uint32_t teams = kWarps / slices;
  const uint32_t team = warp / slices, slice = warp % slices;
  const uint32_t team_lo = lo + (hi - lo) * team / teams;
  const uint32_t team_hi = lo + (hi - lo) * (team + 1) / teams;
  const uint32_t steps = slice_chunks / 32;
  const uint32_t units = (team_hi - team_lo) * steps;  // (group, step) pairs of this warp
  const uint32_t slice_block = slice * steps;          // the slice's first 32-chunk column block

  // The ring: kDepth steps of kRows chunks of A and their scale pairs.
  Tensor ring_a = make_tensor<uint128_t>(Shape<Int<kRows>, Int<kDepth>>{});
  Tensor ring_s = make_tensor<uint16_t>(Shape<Int<kRows>, Int<kDepth>>{});
  const Copy_Atom<StreamingCopy, uint128_t> streaming;

  uint32_t load_group = team_lo, load_step = 0;
  auto load = [&](auto slot) {
    // The group's rows x this step's 32 chunks; this lane's column; rows and chunks in bounds.
    Tensor tile_a = local_tile(gA, Shape<Int<kRows>, _32>{}, make_coord(load_group, slice_block + load_step));
    Tensor tile_s = local_tile(gSA, Shape<Int<kRows>, _32>{}, make_coord(load_group, slice_block + load_step));
    const bool chunk_ok = (slice_block + load_step) * 32 + lane < static_cast<uint32_t>(p.chunks);
    Tensor ok = make_tensor<bool>(Shape<Int<kRows>>{});
    CUTE_UNROLL
    for (int r = 0; r < kRows; ++r) ok(r) = chunk_ok && load_group * kRows + r < static_cast<uint32_t>(p.m);
    Tensor dst_a = ring_a(_, slot);
    Tensor src_a = zipped_divide(tile_a(_, lane), Shape<_1>{});
    Tensor dst_a2 = zipped_divide(dst_a, Shape<_1>{});
    copy_if(streaming, ok, src_a, dst_a2);
    Tensor dst_s = ring_s(_, slot);
    clear(dst_s);  // 0 past the row or the rows: 0 * a stale value stays 0
    copy_if(ok, tile_s(_, lane), dst_s);
    if (++load_step == steps) {
      load_step = 0;
      ++load_group;
    }
  };

  CUTE_UNROLL
  for (int d = 0; d < kDepth; ++d) {
    if (d < static_cast<int>(units)) load(d);
  }
  decode_vector(gB, gSB, p.chunks, padded, vector);
  __syncthreads();

  float acc[kRows] = {};
  uint32_t step = 0, group = team_lo;
  const uint32_t first_chunk = slice * slice_chunks + lane;
  auto decode = [&](auto slot) {
    const uint32_t chunk = first_chunk + 32 * step;
    const uint4 low = vector.low[chunk];
    const uint4 high = vector.high[chunk];
    const uint4 blocks = vector.blocks[chunk];
    const uint2 unmagic = vector.unmagic[chunk];
    CUTE_UNROLL
    for (int r = 0; r < kRows; ++r) {
      const uint128_t raw = ring_a(r, slot);
      const uint4 a = *reinterpret_cast<const uint4*>(&raw);
      int first = dot8(a.x, low.x, low.y, static_cast<int>(blocks.x), positive, negative);
      first = dot8(a.y, low.z, low.w, first, positive, negative);
      int second = dot8(a.z, high.x, high.y, static_cast<int>(blocks.y), positive, negative);
      second = dot8(a.w, high.z, high.w, second, positive, negative);
      const float2 sfa = e4m3x2_to_float2(ring_s(r, slot));
      acc[r] = fmaf(fmaf(__int_as_float(first), __uint_as_float(blocks.z), __uint_as_float(unmagic.x)), sfa.x, acc[r]);
      acc[r] = fmaf(fmaf(__int_as_float(second), __uint_as_float(blocks.w), __uint_as_float(unmagic.y)), sfa.y, acc[r]);
    }
    if (++step == steps) {  // the group is summed: one row a lane, written by its first lane
      const float total = transpose_reduce(acc, static_cast<int>(lane));
      const uint32_t row = group * kRows + ((lane >> 3) & (kRows - 1));
      if ((lane & 7) == 0 && row < static_cast<uint32_t>(p.m)) {
        if (slices == 1) {
          gC(row) = __float2half_rn(total);
        } else {
          vector.partial[slice * p.rows_cap + (row - lo * kRows)] = total;
        }
      }
      CUTE_UNROLL
      for (int r = 0; r < kRows; ++r) acc[r] = 0.0f;
      step = 0;
      ++group;
    }
  };

  uint32_t unit = 0;
#pragma unroll 1
  for (; unit + 2 * kDepth <= units; unit += kDepth) {  // every slot refilled
    CUTE_UNROLL
    for (int d = 0; d < kDepth; ++d) {
      decode(d);
      load(d);
    }
  }
#pragma unroll 1
  for (; unit < units; unit += kDepth) {
    CUTE_UNROLL
    for (int d = 0; d < kDepth; ++d) {
      if (unit + d < units) {
        decode(d);
        if (unit + d + kDepth < units) load(d);
      }
    }
  }

  if (slices > 1) {  // the slices' partial sums, in slice order (deterministic)
    __syncthreads();
    const uint32_t first_row = lo * kRows;
    const uint32_t rows = min(hi * kRows, static_cast<uint32_t>(p.m)) - first_row;
    for (uint32_t i = threadIdx.x; i < rows; i += blockDim.x) {
      float sum = 0.0f;
      for (uint32_t s = 0; s < slices; ++s) sum += vector.partial[s * p.rows_cap + i];
      gC(first_row + i) = __float2half_rn(sum);
    }
  }
}

}  // namespace nvfp4_gemv_cute
