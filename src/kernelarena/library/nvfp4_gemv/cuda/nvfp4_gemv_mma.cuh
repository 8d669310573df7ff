// The tensor-core NVFP4 GEMV kernel (see nvfp4_gemv.cu for the design and the other kernels).
//
// FP4 e2m1 has no conversion instruction before sm_100, but its bits drop into FP8 e4m3 without
// arithmetic: a code s.e1e0.m placed as s000.e1e0m00 is the e4m3 number e2m1 * 2^-6 (exponent 1-3
// normal, exponent 0 the subnormal 0.5 or 0), so 4 codes of one register become 4 e4m3 bytes
// with 2 shifts and 2 LOP3 (the low nibbles of its bytes) or 1 shift and 2 LOP3 (the high
// nibbles). mma.m16n8k32 e4m3 x e4m3 -> f32 (sm_89+) then does the multiply-adds: A is 16 rows
// of the matrix, B the vector spread over the 8 columns so that each column holds the values of
// one 16-value scale group and zeros elsewhere. Every product a * b * 2^-12 is a multiple of
// 2^-14 below 2^-6.8, a column's 16 of them sum exactly in float32, and a thread's 4 accumulator
// values are 4 groups of its rows: it scales each by sfa * sfb (float32, exact) and adds.
//
// k order. A warp tile is 16 rows x 256 values (128 bytes a row, 16 scale groups). Thread (g, t)
// (g = lane / 4, t = lane % 4) holds bytes 64h + 16t .. +15 of rows g and g + 8 (h = 0, 1: two
// 16-byte loads a row); 32-bit word w of those bytes is values 128h + 32t + 8w + 0..7, of group
// 8h + 2t + w / 2. The mma for (h, w) takes word w of every thread: its low nibbles as the A
// registers of k 4t..4t+3, the high nibbles as those of 16 + 4t..; so its 32 k are 4 groups, one
// per t, and the group of t goes to column t + 4h of the accumulator D[w / 2]. A lane then owns
// columns 2t and 2t + 1 of both accumulators: groups 4t .. 4t + 3 of the tile, whose scales are
// one aligned 4-byte word of each row (both scale layouts). B: the lanes g == t + 4h hold the
// vector for the mmas of h (its bytes 64h + 16t .. +15, decoded the same way), every other lane
// zeros; the vector is decoded once per block and batch into shared memory in that order.
//
// Work: an item is a tile of 16 * groups rows of one batch; k_warps warps share each 16 rows,
// each ``steps`` tiles of 256 values of k (their sums meet in shared memory). A thread copies its
// own 64 bytes of A and 8 scale bytes a step into its own shared-memory slots with cp.async, kStages
// steps ahead (no barrier: cp.async.wait_group orders them), and decodes from there.
#pragma once

#include "nvfp4_gemv_kernels.cuh"  // first_item, opaque_zero

namespace nvfp4_gemv {

constexpr int kMmaRows = 16;           // rows of a warp tile: the mma's M
constexpr int kMmaTileBytes = 128;     // of a row of A per step: 256 values
constexpr int kMmaTileGroups = 16;     // scale groups per step
constexpr int kMmaVectorBytes = 256;   // decoded vector (one e4m3 byte a value) per step

// e2m1 codes -> e4m3 bytes of e2m1 * 2^-6: the low nibble of each byte of x, and the high one.
__device__ __forceinline__ uint32_t e4m3_of_low_nibbles(uint32_t x) {
  return ((x << 4) & 0x80808080u) | ((x << 2) & 0x1C1C1C1Cu);
}

__device__ __forceinline__ uint32_t e4m3_of_high_nibbles(uint32_t x) {
  return (x & 0x80808080u) | ((x >> 2) & 0x1C1C1C1Cu);
}

__device__ __forceinline__ void mma_e4m3(float (&d)[4], uint32_t a0, uint32_t a1, uint32_t a2, uint32_t a3,
                                         uint32_t b0, uint32_t b1) {
  asm("mma.sync.aligned.m16n8k32.row.col.f32.e4m3.e4m3.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
      "{%0, %1, %2, %3};\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
}

__device__ __forceinline__ uint32_t word_of(const uint4& v, int w) {
  return w == 0 ? v.x : w == 1 ? v.y : w == 2 ? v.z : v.w;
}

// Integer form: PRMT decodes into offset bytes 12 + 2a (u8, as the dp4a kernels do: the table of
// non-negative codes with the negative ones zeroed by PRMT's sign-replicate mode, and the table of
// negative codes on the sign-flipped word; two operands, each zero where the other is not), and
// mma.m16n8k32 u8 x s8 -> s32 (IMMA, native on sm_80+) multiplies them by 2b. The two operands go
// through one mma each into the same accumulators, which start at magic - 12 sum(2b) per group:
// their bits are then the float 12582912 + sum(2a * 2b), exactly, and two FMAs remove the offset
// and scale (see accumulate in nvfp4_gemv_details.cuh).
__device__ __forceinline__ void mma_u8s8(int (&d)[4], uint32_t a0, uint32_t a1, uint32_t a2, uint32_t a3,
                                         uint32_t b0, uint32_t b1) {
  asm("mma.sync.aligned.m16n8k32.row.col.s32.u8.s8.s32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
      "{%0, %1, %2, %3};\n"
      : "+r"(d[0]), "+r"(d[1]), "+r"(d[2]), "+r"(d[3])
      : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
}

// Per-group tables of the vector, beside its decoded values: float (e4m3 form: sfb * 2^12) or
// three words (integer form: sfb / 4, -magic * sfb / 4, and the accumulator start).
constexpr int scale_words(bool integer) { return integer ? 3 : 1; }

// Dynamic shared memory of the mma kernel: the ring (per thread and stage, 4 x 16 bytes of A and 2
// scale words), then the decoded vector and its per-group tables over span_tiles steps.
constexpr size_t mma_shared_bytes(int stages, int threads, int span_tiles, bool integer) {
  return size_t(stages) * threads * (4 * 16 + 2 * 4) +
         size_t(span_tiles) * (kMmaVectorBytes + 4 * scale_words(integer) * kMmaTileGroups);
}
constexpr size_t kMmaStaticShared = sizeof(float) * 2 * kMaxWarps * kMmaRows;

// p.k_warps warps share 16 rows, each p.steps tiles of k; tiles past the row (k_warps * steps may
// exceed k / 256) read zeros and meet a zero vector. kInteger picks the decode and the mma (above).
template <int kStages, int kMinBlocks, bool kInteger>
__global__ void __launch_bounds__(kMaxThreads, kMinBlocks) gemv_mma_kernel(const Params p) {
  __shared__ float partial[2][kMaxWarps * kMmaRows];
  extern __shared__ uint4 shared[];

  const Team team = make_team(p, kMmaRows, static_cast<int>(blockDim.x >> 5));
  const int64_t first = first_item(p, blockIdx.x);
  const int64_t last = first_item(p, blockIdx.x + 1);
  if (first >= last) return;  // the same for the whole block

  const uint32_t threads = blockDim.x;
  const int g = team.lane >> 2;
  const int t = team.lane & 3;
  const uint32_t span_groups = uint32_t(p.k_warps * p.steps) * kMmaTileGroups;
  uint4* a_ring = shared;
  uint32_t* s_ring = reinterpret_cast<uint32_t*>(shared + kStages * 4 * threads);
  uint8_t* vector_table = reinterpret_cast<uint8_t*>(s_ring + kStages * 2 * threads);
  // [scale_words][span_groups] words: 16-byte aligned, each lane reads 4 groups at once.
  uint32_t* group_table = reinterpret_cast<uint32_t*>(vector_table + span_groups * (kMmaVectorBytes / kMmaTileGroups));
  const uint32_t a_ring_shared = shared_address(a_ring + threadIdx.x);
  const uint32_t s_ring_shared = shared_address(s_ring + threadIdx.x);
  const uint32_t zero = opaque_zero(p);
  const uint32_t positive = kPositiveLow + zero;
  const uint32_t negative = kNegativeLow + zero;

  // Copies: this thread's bytes of rows g and g + 8, for the (item, step) after the last copied.
  // Source pointers advance by a tile a step and are set afresh only at a new item; rows past m
  // copy 0 bytes from row 0 (a valid address). "Ragged" spans (k_warps * steps * 256 > k) check
  // every copy against the row's end; the others never run past it.
  const uint32_t a_bytes = uint32_t(p.chunks) * kChunkBytes;  // k / 2
  const uint32_t groups = uint32_t(p.chunks) * 2;             // k / 16
  const bool ragged = uint32_t(p.k_warps * p.steps) * kMmaTileBytes > a_bytes;
  const uint32_t first_tile = uint32_t(team.k_warp * p.steps);
  const uint32_t s_step = p.sfa_layout.column(kMmaTileGroups);  // 16 groups on, in both layouts
  Cursor copy_at{first / p.tiles_per_batch, static_cast<uint32_t>(first % p.tiles_per_batch)};
  int64_t copy_item = first;
  int copy_step = 0;
  const uint8_t* copy_a[2];
  const uint8_t* copy_s[2];
  uint32_t a_size[2], s_size[2];
  uint32_t copy_tile = first_tile;
  auto aim_copies = [&]() {  // at step 0 of item copy_item
    const uint32_t row0 = warp_first_row(team, copy_at, kMmaRows) + g;
    const uint8_t* a_batch = p.a + copy_at.batch * p.a_batch + first_tile * kMmaTileBytes + 16 * t;
    const uint8_t* s_batch =
        p.sfa + copy_at.batch * p.sfa_layout.batch + p.sfa_layout.column(first_tile * kMmaTileGroups + 4 * t);
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      const uint32_t row = row0 + 8 * r;
      const bool row_ok = row < p.m;
      copy_a[r] = a_batch + (row_ok ? row * p.a_row : 0u);
      copy_s[r] = s_batch + (row_ok ? p.sfa_layout.row(row) : 0u);
      a_size[r] = row_ok ? 16u : 0u;
      s_size[r] = row_ok ? 4u : 0u;
    }
    copy_tile = first_tile;
  };
  aim_copies();
  auto copy_next = [&](uint32_t stage) {
    if (copy_item < last) {
      const uint32_t a_stage = a_ring_shared + stage * 4 * threads * 16u;
      const uint32_t s_stage = s_ring_shared + stage * 2 * threads * 4u;
      if (!ragged) {
#pragma unroll
        for (int r = 0; r < 2; ++r) {
#pragma unroll
          for (int h = 0; h < 2; ++h) copy_async_16(a_stage + (2 * r + h) * threads * 16u, copy_a[r] + 64 * h, a_size[r]);
          copy_async_4(s_stage + r * threads * 4u, copy_s[r], s_size[r]);
        }
      } else {
        const uint32_t at = copy_tile * kMmaTileBytes + 16 * t;
        const bool s_ok = copy_tile * kMmaTileGroups + 4 * t < groups;
#pragma unroll
        for (int r = 0; r < 2; ++r) {
#pragma unroll
          for (int h = 0; h < 2; ++h) {
            const bool ok = at + 64 * h < a_bytes;
            copy_async_16(a_stage + (2 * r + h) * threads * 16u, ok ? copy_a[r] + 64 * h : p.a, ok ? a_size[r] : 0u);
          }
          copy_async_4(s_stage + r * threads * 4u, s_ok ? copy_s[r] : p.sfa, s_ok ? s_size[r] : 0u);
        }
      }
#pragma unroll
      for (int r = 0; r < 2; ++r) {
        copy_a[r] += kMmaTileBytes;
        copy_s[r] += s_step;
      }
      ++copy_tile;
      if (++copy_step == p.steps) {
        copy_step = 0;
        ++copy_item;
        copy_at = advance(p, copy_at);
        if (copy_item < last) aim_copies();
      }
    }
    commit_copies();
  };

#pragma unroll 1
  for (uint32_t stage = 0; stage < kStages; ++stage) copy_next(stage);

  // The vector of one batch, decoded for the whole span: 16-byte chunk c of b -> 32 bytes at 32c
  // (each word's two decoded registers in turn), zeros past k; then the per-group tables.
  int64_t table_batch = -1;
  auto fill_tables = [&](int64_t batch) {
    const uint8_t* b = p.b + batch * p.b_batch;
    const uint8_t* sfb = p.sfb + batch * p.sfb_layout.batch;
    uint4* out = reinterpret_cast<uint4*>(vector_table);
    for (uint32_t c = threadIdx.x; c < span_groups / 2; c += threads) {
      uint4 raw = make_uint4(0, 0, 0, 0);
      if (c < uint32_t(p.chunks)) raw = __ldg(reinterpret_cast<const uint4*>(b + c * kChunkBytes));
      const uint32_t words[4] = {raw.x, raw.y, raw.z, raw.w};
      uint32_t decoded[8];
#pragma unroll
      for (int w = 0; w < 4; ++w) {
        if constexpr (kInteger) {
          decode_vector_word(words[w], positive, negative, decoded[2 * w], decoded[2 * w + 1]);
        } else {
          decoded[2 * w] = e4m3_of_low_nibbles(words[w]);
          decoded[2 * w + 1] = e4m3_of_high_nibbles(words[w]);
        }
      }
      out[2 * c] = make_uint4(decoded[0], decoded[1], decoded[2], decoded[3]);
      out[2 * c + 1] = make_uint4(decoded[4], decoded[5], decoded[6], decoded[7]);
    }
    __syncthreads();  // the sums of 2b below read the decoded vector
    for (uint32_t j = threadIdx.x; j < span_groups; j += threads) {
      float scale = 0.0f;
      if (j < groups) {
        const __nv_fp8_storage_t bits = sfb[p.sfb_layout.column(j)];
        scale = __half2float(__half(__nv_cvt_fp8_to_halfraw(bits, __NV_E4M3)));
      }
      if constexpr (kInteger) {
        const uint32_t* values = reinterpret_cast<const uint32_t*>(vector_table) + 4 * j;  // 16 bytes a group
        int sum = 0;
#pragma unroll
        for (int w = 0; w < 4; ++w) sum = __dp4a(static_cast<int>(values[w]), 0x01010101, sum);
        group_table[j] = __float_as_uint(scale * 0.25f);
        group_table[span_groups + j] = __float_as_uint(-kMagic * scale * 0.25f);  // exact
        group_table[2 * span_groups + j] = static_cast<uint32_t>(kMagicBits - 12 * sum);
      } else {
        group_table[j] = __float_as_uint(scale * 4096.0f);  // the two factors 2^-6 of the e4m3 form
      }
    }
  };

  // B registers: lanes g == t hold the vector of the h = 0 mmas, lanes g == t + 4 those of h = 1;
  // the other set (all of both elsewhere) stays zero.
  const int lane_h = g == t ? 0 : g == t + 4 ? 1 : -1;
  uint4 vector_regs[2][2] = {};

  Cursor at = {first / p.tiles_per_batch, static_cast<uint32_t>(first % p.tiles_per_batch)};
  uint32_t stage = 0;
  int reducer = 0;
#pragma unroll 1
  for (int64_t item = first; item < last; ++item) {
    if (at.batch != table_batch) {
      __syncthreads();  // every warp is done with the previous batch's tables
      table_batch = at.batch;
      fill_tables(table_batch);
      __syncthreads();
    }
    float acc[2] = {0.0f, 0.0f};  // rows g and g + 8, this lane's groups
#pragma unroll 1
    for (int step = 0; step < p.steps; ++step) {
      const int tile = team.k_warp * p.steps + step;
      wait_copies<kStages - 1>();
      uint4 a[2][2];
#pragma unroll
      for (int q = 0; q < 4; ++q) a[q >> 1][q & 1] = a_ring[(stage * 4 + q) * threads + threadIdx.x];
      const uint32_t s_row0 = s_ring[(stage * 2) * threads + threadIdx.x];
      const uint32_t s_row8 = s_ring[(stage * 2 + 1) * threads + threadIdx.x];
      // Indexed at compile time: a run-time index would put the registers in local memory.
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        if (lane_h == h) {
          const uint4* v = reinterpret_cast<const uint4*>(vector_table + tile * kMmaVectorBytes + (4 * h + t) * 32);
          vector_regs[h][0] = v[0];
          vector_regs[h][1] = v[1];
        }
      }
      const uint32_t group0 = tile * kMmaTileGroups + 4 * t;  // this lane's groups: group0 .. + 3
      const float2 sa01 = e4m3x2_to_float2(s_row0);
      const float2 sa23 = e4m3x2_to_float2(s_row0 >> 16);
      const float2 sb01 = e4m3x2_to_float2(s_row8);
      const float2 sb23 = e4m3x2_to_float2(s_row8 >> 16);
      // Accumulator x, registers 0 and 2 (rows g, g + 8): group group0 + x; 1 and 3: group0 + 2 + x.
      if constexpr (kInteger) {
        const uint4 start = *reinterpret_cast<const uint4*>(group_table + 2 * span_groups + group0);
        int d[2][4] = {{int(start.x), int(start.z), int(start.x), int(start.z)},
                       {int(start.y), int(start.w), int(start.y), int(start.w)}};
#pragma unroll
        for (int h = 0; h < 2; ++h) {
#pragma unroll
          for (int w = 0; w < 4; ++w) {
            const uint32_t x0 = word_of(a[0][h], w);
            const uint32_t x8 = word_of(a[1][h], w);
            const uint32_t f0 = x0 ^ kSignBits;
            const uint32_t f8 = x8 ^ kSignBits;
            const uint4& v = vector_regs[h][w >> 1];
            const uint32_t b_low = (w & 1) ? v.z : v.x;
            const uint32_t b_high = (w & 1) ? v.w : v.y;
            mma_u8s8(d[w >> 1], prmt(positive, kPositiveHigh, x0), prmt(positive, kPositiveHigh, x8),
                     prmt(positive, kPositiveHigh, x0 >> 16), prmt(positive, kPositiveHigh, x8 >> 16), b_low, b_high);
            mma_u8s8(d[w >> 1], prmt(negative, kNegativeHigh, f0), prmt(negative, kNegativeHigh, f8),
                     prmt(negative, kNegativeHigh, f0 >> 16), prmt(negative, kNegativeHigh, f8 >> 16), b_low, b_high);
          }
        }
        const float4 sfb = *reinterpret_cast<const float4*>(group_table + group0);
        const float4 unmagic = *reinterpret_cast<const float4*>(group_table + span_groups + group0);
        const float sfb_of[4] = {sfb.x, sfb.y, sfb.z, sfb.w};
        const float unmagic_of[4] = {unmagic.x, unmagic.y, unmagic.z, unmagic.w};
        const float sa_of[2][4] = {{sa01.x, sa01.y, sa23.x, sa23.y}, {sb01.x, sb01.y, sb23.x, sb23.y}};
#pragma unroll
        for (int r = 0; r < 2; ++r) {
#pragma unroll
          for (int j = 0; j < 4; ++j) {  // group group0 + j: accumulator j & 1, register 2r + j / 2
            const float block = fmaf(__int_as_float(d[j & 1][2 * r + (j >> 1)]), sfb_of[j], unmagic_of[j]);
            acc[r] = fmaf(block, sa_of[r][j], acc[r]);
          }
        }
      } else {
        float d[2][4] = {};
#pragma unroll
        for (int h = 0; h < 2; ++h) {
#pragma unroll
          for (int w = 0; w < 4; ++w) {
            const uint32_t x0 = word_of(a[0][h], w);
            const uint32_t x8 = word_of(a[1][h], w);
            const uint4& v = vector_regs[h][w >> 1];
            const uint32_t b_low = (w & 1) ? v.z : v.x;
            const uint32_t b_high = (w & 1) ? v.w : v.y;
            mma_e4m3(d[w >> 1], e4m3_of_low_nibbles(x0), e4m3_of_low_nibbles(x8), e4m3_of_high_nibbles(x0),
                     e4m3_of_high_nibbles(x8), b_low, b_high);
          }
        }
        const float4 sfb = *reinterpret_cast<const float4*>(group_table + group0);
        acc[0] = fmaf(d[0][0], sa01.x * sfb.x, acc[0]);
        acc[0] = fmaf(d[1][0], sa01.y * sfb.y, acc[0]);
        acc[0] = fmaf(d[0][1], sa23.x * sfb.z, acc[0]);
        acc[0] = fmaf(d[1][1], sa23.y * sfb.w, acc[0]);
        acc[1] = fmaf(d[0][2], sb01.x * sfb.x, acc[1]);
        acc[1] = fmaf(d[1][2], sb01.y * sfb.y, acc[1]);
        acc[1] = fmaf(d[0][3], sb23.x * sfb.z, acc[1]);
        acc[1] = fmaf(d[1][3], sb23.y * sfb.w, acc[1]);
      }
      // Refill the stage just read: its values are in registers now.
      copy_next(stage);
      stage = stage + 1 == kStages ? 0 : stage + 1;
    }
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      acc[r] += __shfl_xor_sync(0xffffffffu, acc[r], 1);
      acc[r] += __shfl_xor_sync(0xffffffffu, acc[r], 2);
    }
    const uint32_t row0 = warp_first_row(team, at, kMmaRows);
    if (p.k_warps == 1) {
      if (t == 0) {
        store_row(p, at.batch, row0 + g, acc[0]);
        store_row(p, at.batch, row0 + g + 8, acc[1]);
      }
    } else {
      // Slot by item parity: one barrier an item (see finish_tile).
      float* slot = partial[item & 1];
      if (t == 0) {
        slot[team.warp * kMmaRows + g] = acc[0];
        slot[team.warp * kMmaRows + g + 8] = acc[1];
      }
      sync_team(team);
      if (team.k_warp == reducer && team.lane < kMmaRows) {
        float sum = 0.0f;
        for (int w = 0; w < p.k_warps; ++w) sum += slot[(team.group * p.k_warps + w) * kMmaRows + team.lane];
        store_row(p, at.batch, row0 + team.lane, sum);
      }
      reducer = reducer + 1 == p.k_warps ? 0 : reducer + 1;
    }
    at = advance(p, at);
  }
  wait_copies<0>();  // only empty groups remain; nothing may be in flight when the block exits
}

}  // namespace nvfp4_gemv
