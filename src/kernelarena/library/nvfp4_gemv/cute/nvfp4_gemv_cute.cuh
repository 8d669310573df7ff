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
// The decode, the shared-memory vector and the butterfly are the CUDA solution's own, from
// _shared/nvfp4_decode.cuh.
#pragma once

#include <cuda_fp16.h>
#include <cuda_fp8.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <cute/tensor.hpp>

#include "_shared/nvfp4_decode.cuh"

namespace nvfp4_gemv_cute {

using cute::uint128_t;

constexpr int kWarps = 8;
constexpr int kThreads = 32 * kWarps;
constexpr int kRows = 4;   // rows a group
constexpr int kDepth = 2;  // steps in flight (register ring)

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
    store_vector_chunk(raw, scales, chunk, kPositiveLow, kNegativeLow, v);
  }
}

__global__ void __launch_bounds__(kThreads, 2) gemv_kernel(const Params p) {
  extern __shared__ uint4 shared[];
  const uint32_t slices = static_cast<uint32_t>(p.slices);
  const uint32_t slice_chunks = static_cast<uint32_t>(p.slice_chunks);  // a multiple of 32
  const uint32_t padded = slices * slice_chunks;
  const SharedVector vector(shared, padded);

  const uint32_t zero = opaque_zero(static_cast<uint32_t>(p.m));
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
      const float total = transpose_reduce<kRows>(acc, static_cast<int>(lane));
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
