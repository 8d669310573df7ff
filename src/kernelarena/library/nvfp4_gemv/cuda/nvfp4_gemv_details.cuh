// Device code of the NVFP4 GEMV (see nvfp4_gemv.cu for the design and the per-shape choices):
// the loads, and the pieces the two kernels of nvfp4_gemv_kernels.cuh share. The FP4 decode, the
// dot products and the row reduction are _shared/nvfp4_decode.cuh's (the CuTe solution uses them
// too); its words ("chunk", "scale pair") are used here. A chunk's two scale bytes are adjacent in
// both scale layouts.
#pragma once

#include <cuda_fp16.h>
#include <cuda_fp8.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "_shared/mbarrier.cuh"
#include "_shared/nvfp4_decode.cuh"

namespace nvfp4_gemv {

constexpr int kMaxWarps = 8;  // per block; 2 blocks of 256 threads per SM at <= 128 registers
constexpr int kMaxThreads = 32 * kMaxWarps;
constexpr int kChunkBytes = 16;

// A scale's byte offset: row part + column part + batch part, for both layouts. Offsets within a
// batch are 32-bit (checked on the host): one IMAD per address instead of 64-bit arithmetic.
struct ScaleLayout {
  uint32_t r32, r4, r128;  // strides of row % 32, row / 32 % 4, row / 128
  uint32_t c4, c_rest;     // strides of column % 4, column / 4
  int64_t batch;
  __device__ __forceinline__ uint32_t row(uint32_t i) const {
    return (i & 31) * r32 + ((i >> 5) & 3) * r4 + (i >> 7) * r128;
  }
  __device__ __forceinline__ uint32_t column(uint32_t j) const { return (j & 3) * c4 + (j >> 2) * c_rest; }
};

struct Params {
  const uint8_t* a;
  const uint8_t* b;
  const uint8_t* sfa;
  const uint8_t* sfb;
  __half* c;
  uint32_t m;                // rows (< 2^31)
  int64_t a_batch, b_batch;  // bytes
  int64_t c_row, c_batch;    // elements
  uint32_t a_row;            // bytes
  ScaleLayout sfa_layout, sfb_layout;
  int64_t items;            // l * tiles_per_batch work items, a tile of rows of one batch each
  int32_t tiles_per_batch;
  int32_t chunks;           // k / 32
  int32_t k_warps;          // warps sharing a row (split over k), reduced through shared memory
  int32_t passes;           // sweeps over k when a row exceeds k_warps * 32 * chunks per lane
  // The whole-row kernel (nvfp4_gemv_rows.cuh) only:
  int32_t k_slices;          // warps sharing a row, each a slice of k
  int32_t slice_chunks;      // chunks a slice, a multiple of 32
  int32_t blocks_per_batch;  // each block a range of one batch's row groups
  int32_t rows_cap;          // rows a block at most (its partial sums' stride)
};

// A is read once: 16-byte loads that skip L1 (ld.global.nc.L1::no_allocate), predicated rather
// than branched around. When ``use`` is false the registers keep whatever they held: harmless, since
// such values meet a zero vector (chunks past the row) or are never stored (rows past m).
__device__ __forceinline__ uint4 load_streaming(const uint8_t* p, bool use) {
  uint4 v;
  asm("{\n"
      ".reg .pred use;\n"
      "setp.ne.b32 use, %5, 0;\n"
      "@use ld.global.nc.L1::no_allocate.v4.u32 {%0, %1, %2, %3}, [%4];\n"
      "}"
      : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
      : "l"(p), "r"(static_cast<int>(use)));
  return v;
}

// The two scale bytes of a chunk (0 when not used); through L1, which keeps the sectors that the
// permuted layout shares between neighbouring rows.
__device__ __forceinline__ uint32_t load_scale_pair(const uint8_t* p, bool use) {
  unsigned short v = 0;
  asm("{\n"
      ".reg .pred use;\n"
      "setp.ne.b32 use, %2, 0;\n"
      "@use ld.global.nc.u16 %0, [%1];\n"
      "}"
      : "+h"(v)
      : "l"(p), "r"(static_cast<int>(use)));
  return v;
}

// The vector's share of one lane: per chunk, int8 2 * b, the dp4a start (magic - 12 * sum(2b))
// and sfb / 4 with -magic * sfb / 4 per block (the block sums count 2a * 2b, four times a * b).
template <int kChunks>
struct Vector {
  uint32_t b2[kChunks][8];
  int start[kChunks][2];
  float scale[kChunks][2];
  float unmagic[kChunks][2];
};

template <int kChunks>
struct Tile {
  static constexpr int kRows = 4 / kChunks;
  uint4 a[kRows][kChunks];
  uint32_t s[kRows][kChunks];
};

struct Cursor {
  int64_t batch;
  uint32_t tile;
};

__device__ __forceinline__ Cursor advance(const Params& p, Cursor at) {
  return ++at.tile == static_cast<uint32_t>(p.tiles_per_batch) ? Cursor{at.batch + 1, 0u} : at;
}

// This lane's chunks in the current pass. Chunks past the row are not read; their vector is zero.
template <int kChunks>
struct Lane {
  bool valid[kChunks];
  uint32_t a_offset[kChunks];    // byte offset of the chunk in its row of A (and of b)
  uint32_t sfa_offset[kChunks];  // column part of the chunk's scale pair in sfa
  uint32_t sfb_offset[kChunks];

  __device__ __forceinline__ void set(const Params& p, int pass, int k_warp, int lane) {
    const int32_t base = (pass * p.k_warps + k_warp) * 32 * kChunks + lane;
#pragma unroll
    for (int i = 0; i < kChunks; ++i) {
      valid[i] = base + 32 * i < p.chunks;
      const uint32_t chunk = valid[i] ? base + 32 * i : 0;
      a_offset[i] = chunk * kChunkBytes;
      sfa_offset[i] = p.sfa_layout.column(2 * chunk);
      sfb_offset[i] = p.sfb_layout.column(2 * chunk);
    }
  }
};

template <int kChunks>
__device__ __forceinline__ void load_vector(const Params& p, const Lane<kChunks>& lane, int64_t batch,
                                            uint32_t positive, uint32_t negative, Vector<kChunks>& v) {
#pragma unroll
  for (int i = 0; i < kChunks; ++i) {
    uint4 raw = make_uint4(0, 0, 0, 0);
    uint32_t scales = 0;
    if (lane.valid[i]) {
      raw = __ldg(reinterpret_cast<const uint4*>(p.b + batch * p.b_batch + lane.a_offset[i]));
      scales = load_scale_pair(p.sfb + batch * p.sfb_layout.batch + lane.sfb_offset[i], true);
    }
    const uint32_t words[4] = {raw.x, raw.y, raw.z, raw.w};
#pragma unroll
    for (int w = 0; w < 4; ++w) decode_vector_word(words[w], positive, negative, v.b2[i][2 * w], v.b2[i][2 * w + 1]);
    const float2 sfb = e4m3x2_to_float2(scales);
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      int sum = 0;
#pragma unroll
      for (int w = 0; w < 4; ++w) sum = __dp4a(static_cast<int>(v.b2[i][4 * h + w]), 0x01010101, sum);
      v.start[i][h] = kMagicBits - 12 * sum;
      v.scale[i][h] = (h == 0 ? sfb.x : sfb.y) * 0.25f;
      v.unmagic[i][h] = -kMagic * v.scale[i][h];  // exact: at most 6 significant bits
    }
  }
}

template <int kChunks>
__device__ __forceinline__ void load_tile(const Params& p, const Lane<kChunks>& lane, Cursor at, uint32_t row0,
                                          Tile<kChunks>& t) {
  const uint8_t* a_batch = p.a + at.batch * p.a_batch;
  const uint8_t* sfa_batch = p.sfa + at.batch * p.sfa_layout.batch;
#pragma unroll
  for (int r = 0; r < Tile<kChunks>::kRows; ++r) {
    const uint32_t row = row0 + r;
    const bool row_ok = row < p.m;
    const uint8_t* a_row = a_batch + static_cast<uint64_t>(row) * p.a_row;
    const uint8_t* sfa_row = sfa_batch + p.sfa_layout.row(row);
#pragma unroll
    for (int i = 0; i < kChunks; ++i) {
      t.a[r][i] = load_streaming(a_row + lane.a_offset[i], row_ok && lane.valid[i]);
      t.s[r][i] = load_scale_pair(sfa_row + lane.sfa_offset[i], row_ok && lane.valid[i]);
    }
  }
}

// Adds each row's share of this lane to acc. Per 16-value block: the dp4a sum n = sum 2a * 2b is
// exact in int32 and, offset by the magic number, exact as a float; one FMA removes the offset
// and scales (n * sfb / 4 has at most 16 significant bits: exact), one more adds times sfa.
template <int kChunks>
__device__ __forceinline__ void accumulate(const Tile<kChunks>& t, const Vector<kChunks>& v, uint32_t positive,
                                           uint32_t negative, float (&acc)[Tile<kChunks>::kRows]) {
#pragma unroll
  for (int r = 0; r < Tile<kChunks>::kRows; ++r) {
#pragma unroll
    for (int i = 0; i < kChunks; ++i) {
      const uint4 a = t.a[r][i];
      int first = v.start[i][0];
      int second = v.start[i][1];
      first = dot8(a.x, v.b2[i][0], v.b2[i][1], first, positive, negative);
      first = dot8(a.y, v.b2[i][2], v.b2[i][3], first, positive, negative);
      second = dot8(a.z, v.b2[i][4], v.b2[i][5], second, positive, negative);
      second = dot8(a.w, v.b2[i][6], v.b2[i][7], second, positive, negative);
      const float2 sfa = e4m3x2_to_float2(t.s[r][i]);
      acc[r] = fmaf(fmaf(__int_as_float(first), v.scale[i][0], v.unmagic[i][0]), sfa.x, acc[r]);
      acc[r] = fmaf(fmaf(__int_as_float(second), v.scale[i][1], v.unmagic[i][1]), sfa.y, acc[r]);
    }
  }
}

template <int kRows>
constexpr int log2_rows() {
  return kRows == 4 ? 2 : kRows == 2 ? 1 : 0;
}

__device__ __forceinline__ void store_row(const Params& p, int64_t batch, uint32_t row, float value) {
  if (row < p.m) p.c[batch * p.c_batch + row * p.c_row] = __float2half_rn(value);
}

// A warp's place in its block: k_warps warps share a row (each a slice of k), groups of them
// take different rows; a tile is groups * kRows rows of one batch.
// ``warps`` is the count of warps that decode (all of the block but the bulk kernel's producer).
struct Team {
  int lane, warp, warps, k_warp, group, groups;
  uint32_t rows_per_tile;
};

__device__ __forceinline__ Team make_team(const Params& p, int rows, int warps) {
  Team team;
  team.lane = threadIdx.x & 31;
  team.warp = threadIdx.x >> 5;
  team.warps = warps;
  team.k_warp = team.warp % p.k_warps;
  team.group = team.warp / p.k_warps;
  team.groups = warps / p.k_warps;
  team.rows_per_tile = team.groups * rows;
  return team;
}

// A barrier of the decoding warps only (named barrier 1): the bulk kernel's producer warp never
// waits on it, so it cannot be __syncthreads.
__device__ __forceinline__ void sync_team(const Team& team) {
  asm volatile("bar.sync 1, %0;\n" ::"r"(32 * team.warps) : "memory");
}

// First row of this warp's kRows rows in a tile (< 2^31 + 2^10).
__device__ __forceinline__ uint32_t warp_first_row(const Team& team, Cursor at, int rows) {
  return at.tile * team.rows_per_tile + team.group * rows;
}

// The warp's kRows partial sums -> outputs: directly when one warp holds a row, else through
// shared memory (slot by item parity: one barrier a tile is enough, since a slot is written
// again only after every reader has passed the next tile's barrier). The sums over the k_warps
// are made by the first lanes of warp ``reducer``, which the caller rotates tile by tile: that
// extra work then falls on every warp in turn instead of delaying one warp (and, through the
// barrier, the block) every tile.
template <int kRows>
__device__ __forceinline__ void finish_tile(const Params& p, const Team& team, float (*partial)[kMaxWarps * kRows],
                                            Cursor at, int64_t item, int reducer, float (&acc)[kRows]) {
  constexpr int kLog2Rows = log2_rows<kRows>();
  const float total = transpose_reduce<kRows>(acc, team.lane);
  const int row = (team.lane >> (5 - kLog2Rows)) & (kRows - 1);
  const bool writer = (team.lane & ((32 >> kLog2Rows) - 1)) == 0;
  if (p.k_warps == 1) {
    if (writer) store_row(p, at.batch, warp_first_row(team, at, kRows) + row, total);
    return;
  }
  float* slot = partial[item & 1];
  if (writer) slot[team.warp * kRows + row] = total;
  sync_team(team);
  if (team.warp == reducer && team.lane < team.groups * kRows) {  // groups * kRows <= 16
    const int g = team.lane / kRows;
    const int r = team.lane % kRows;
    float sum = 0.0f;
    for (int w = 0; w < p.k_warps; ++w) sum += slot[(g * p.k_warps + w) * kRows + r];
    store_row(p, at.batch, at.tile * team.rows_per_tile + g * kRows + r, sum);
  }
}

// The next reducing warp (see finish_tile); the same sequence in every decoding thread.
__device__ __forceinline__ int next_reducer(const Team& team, int reducer) {
  return reducer + 1 == team.warps ? 0 : reducer + 1;
}

// -- the asynchronous ring (cp.async, sm_80+) --------------------------------------------------------
// Each thread copies its own chunks and scale words into its own shared-memory slots and reads
// back only those, so cp.async.wait_group alone orders the copy before the read: no barrier, no
// mbarrier, nothing that can deadlock. A zero source size writes zeros and reads nothing.

// 16 bytes of A, past L1 (.cg: A is read once).
__device__ __forceinline__ void copy_async_16(uint32_t shared, const void* global, uint32_t bytes) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(shared), "l"(global), "r"(bytes) : "memory");
}

// 4 scale bytes through L1 (.ca), which keeps the sectors neighbouring rows share (permuted layout).
__device__ __forceinline__ void copy_async_4(uint32_t shared, const void* global, uint32_t bytes) {
  asm volatile("cp.async.ca.shared.global [%0], [%1], 4, %2;\n" ::"r"(shared), "l"(global), "r"(bytes) : "memory");
}

__device__ __forceinline__ void commit_copies() { asm volatile("cp.async.commit_group;\n" ::: "memory"); }

// Waits until at most kPending of this thread's committed groups are still in flight.
template <int kPending>
__device__ __forceinline__ void wait_copies() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(kPending) : "memory");
}

// A ring stage holds, per thread, kRows x kChunks slots (q = r * kChunks + i): a 16-byte chunk of
// A at a_stage + q * a_step and the 4-byte scale group holding its pair at s_stage + q * s_step
// (shared addresses; steps of blockDim.x elements, so a warp's slots are contiguous and its
// 16-byte and 4-byte accesses free of bank conflicts). The group of a pair is the 4 scales
// of column block j / 4 (adjacent, 4-byte aligned: the host checks): sfa_offset & ~3, the pair
// at byte sfa_offset & 2 of it. Addresses are 32-bit offsets from the batch's A and sfa (the host
// checks that every offset within a batch fits), formed once a tile and row: a warp's kRows
// rows start on a multiple of kRows (which divides 32), so they share their 32-row group and their
// scale rows are r32 bytes apart in both layouts. Rows past m, and a lane's chunks past the row
// (offset 0), copy 0 bytes from row 0 of the batch (valid, aligned) and hold zeros.
template <int kChunks>
__device__ __forceinline__ void copy_tile(const Params& p, const Lane<kChunks>& lane, const uint8_t* a_batch,
                                          const uint8_t* s_batch, uint32_t row0, uint32_t a_stage,
                                          uint32_t s_stage, uint32_t a_step, uint32_t s_step) {
  const uint32_t a_tile = row0 * p.a_row;
  const uint32_t s_tile = p.sfa_layout.row(row0);
#pragma unroll
  for (int r = 0; r < Tile<kChunks>::kRows; ++r) {
    const bool row_ok = row0 + r < p.m;
    const uint32_t a_row = row_ok ? a_tile + r * p.a_row : 0u;
    const uint32_t s_row = row_ok ? s_tile + r * p.sfa_layout.r32 : 0u;
#pragma unroll
    for (int i = 0; i < kChunks; ++i) {
      const bool use = row_ok && lane.valid[i];
      const uint32_t q = r * kChunks + i;
      copy_async_16(a_stage + q * a_step, a_batch + (a_row + lane.a_offset[i]), use ? 16u : 0u);
      copy_async_4(s_stage + q * s_step, s_batch + (s_row + (lane.sfa_offset[i] & ~3u)), use ? 4u : 0u);
    }
  }
}

// A lane's chunks are lane + 32 i past a multiple of 32, so their parity, and the place of their
// scale pair in its 4-byte group (byte 2 (lane & 1)), is the lane's: ``pairs`` points at that
// half of the lane's first scale word, and a slot's pair is 2 q step halves further.
template <int kChunks>
__device__ __forceinline__ void read_tile(const uint4* a_stage, const uint16_t* pairs, uint32_t step,
                                          Tile<kChunks>& t) {
#pragma unroll
  for (int r = 0; r < Tile<kChunks>::kRows; ++r) {
#pragma unroll
    for (int i = 0; i < kChunks; ++i) {
      const uint32_t q = r * kChunks + i;
      t.a[r][i] = a_stage[q * step];
      t.s[r][i] = pairs[2 * q * step];
    }
  }
}


// -- bulk copies (cp.async.bulk and mbarriers, sm_90) -----------------------------------------------
// One producer lane a row moves whole rows of A and of sfa into a shared-memory stage; the stage's
// "full" barrier counts the bytes (complete_tx), its "empty" barrier one arrival per decoding warp.

// A is read once: its lines are the first the L2 may evict.
__device__ __forceinline__ uint64_t evict_first_policy() {
  uint64_t policy;
  asm volatile("createpolicy.fractional.L2::evict_first.b64 %0, 1.0;\n" : "=l"(policy));
  return policy;
}

// ``bytes`` (a multiple of 16, both addresses 16-byte aligned) from global to shared memory,
// counted on ``barrier`` when they have landed.
__device__ __forceinline__ void bulk_copy(uint32_t shared, const void* global, uint32_t bytes, uint32_t barrier,
                                          uint64_t policy) {
  asm volatile(
      "cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes.L2::cache_hint [%0], [%1], %2, [%3], "
      "%4;\n" ::"r"(shared),
      "l"(global), "r"(bytes), "r"(barrier), "l"(policy)
      : "memory");
}

}  // namespace nvfp4_gemv
