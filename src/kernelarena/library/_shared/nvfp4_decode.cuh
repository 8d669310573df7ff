// NVFP4 (FP4 e2m1 values, an e4m3 scale per 16) decoded for dot products by byte permutes and dp4a:
// one definition for nvfp4_gemv's CUDA and CuTe solutions.
//
// Hopper has no FP4 conversion (cvt for e2m1x2 is sm_100+). PRMT looks up 4 codes at once in
// 8-byte tables: 12 + 2a for non-negative codes, 12 - 2|a| on the sign-flipped codes (the
// selector's sign-replicate mode zeroes the other table's byte). dp4a multiplies by the int8 2b of
// the vector and sums a 16-value block exactly in int32; started from magic - 12 * sum(2b), its
// bits are the float 12582912 + sum(2a * 2b), so two FMAs apply sfb / 4 and sfa.
//
// Words: a "chunk" is 16 bytes of a row: 32 FP4 values, two scale blocks of 16, and the two scale
// bytes of those blocks (a "scale pair"). Byte q of a chunk holds values 2q (low nibble) and 2q + 1,
// so nibble i of 32-bit word w is value 8w + i.
#pragma once

#include <cuda_fp16.h>
#include <cuda_fp8.h>
#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

namespace {

// PRMT tables, byte c for codes c = 0-7: 12 + 2 * e2m1(c) and 12 - 2 * e2m1(c). All bytes are
// below 0x80, so PRMT's sign-replicate mode (selector nibble >= 8) turns them into 0.
constexpr uint32_t kPositiveLow = 0x0F0E0D0Cu;
constexpr uint32_t kPositiveHigh = 0x18141210u;
constexpr uint32_t kNegativeLow = 0x090A0B0Cu;
constexpr uint32_t kNegativeHigh = 0x00040608u;
constexpr uint32_t kSignBits = 0x88888888u;
// 1.5 * 2^23: an int32 n added to its bit pattern reads back as the float 12582912 + n, exactly.
constexpr int kMagicBits = 0x4B400000;
constexpr float kMagic = 12582912.0f;

// Always 0 ((threadIdx + 1) * rows < 2^39 for rows < 2^31), but ptxas cannot tell: the low PRMT
// table words, kPositiveLow + opaque_zero(m) and kNegativeLow + opaque_zero(m), then stay in two
// registers instead of being copied from a constant before every PRMT.
__device__ __forceinline__ uint32_t opaque_zero(uint32_t rows) {
  return static_cast<uint32_t>((static_cast<uint64_t>(threadIdx.x + 1) * rows) >> 50);
}

__device__ __forceinline__ uint32_t prmt(uint32_t low, uint32_t high, uint32_t selector) {
  uint32_t out;
  asm("prmt.b32 %0, %1, %2, %3;" : "=r"(out) : "r"(low), "r"(high), "r"(selector));
  return out;
}

// The 8 values of word x against the int8 vector words (2 * b of values 0-3 and 4-7), added to acc.
// PRMT with x's nibbles as selectors gives 12 + 2a for non-negative codes and 0 for negative ones;
// with the sign bits flipped, 12 - 2|a| for negative codes and 0 for the rest. Both go through dp4a
// (the FMA-heavy pipe) instead of being OR-ed (the ALU pipe, the busier one): 7 ALU operations and
// 4 dp4a per 8 values. The +12 offset is cancelled by the accumulator's starting value.
__device__ __forceinline__ int dot8(uint32_t x, uint32_t b_low, uint32_t b_high, int acc, uint32_t positive,
                                    uint32_t negative) {
  const uint32_t flipped = x ^ kSignBits;
  acc = __dp4a(static_cast<int>(prmt(positive, kPositiveHigh, x)), static_cast<int>(b_low), acc);
  acc = __dp4a(static_cast<int>(prmt(negative, kNegativeHigh, flipped)), static_cast<int>(b_low), acc);
  acc = __dp4a(static_cast<int>(prmt(positive, kPositiveHigh, x >> 16)), static_cast<int>(b_high), acc);
  acc = __dp4a(static_cast<int>(prmt(negative, kNegativeHigh, flipped >> 16)), static_cast<int>(b_high), acc);
  return acc;
}

// 8 values of the vector -> int8 bytes of 2 * b (values 0-3 in low, 4-7 in high).
__device__ __forceinline__ void decode_vector_word(uint32_t x, uint32_t positive, uint32_t negative,
                                                   uint32_t& low, uint32_t& high) {
  const uint32_t flipped = x ^ kSignBits;
  const uint32_t offset_low = prmt(positive, kPositiveHigh, x) | prmt(negative, kNegativeHigh, flipped);
  const uint32_t offset_high =
      prmt(positive, kPositiveHigh, x >> 16) | prmt(negative, kNegativeHigh, flipped >> 16);
  // Bytes 12 + 2b in [0, 24]: (byte | 0x80) - 12 never borrows from the next byte and leaves
  // 0x80 + 2b, whose top bit flipped is the int8 2b.
  low = ((offset_low | 0x80808080u) - 0x0C0C0C0Cu) ^ 0x80808080u;
  high = ((offset_high | 0x80808080u) - 0x0C0C0C0Cu) ^ 0x80808080u;
}

// A scale pair (the low 16 bits of ``bits``) as two floats.
__device__ __forceinline__ float2 e4m3x2_to_float2(uint32_t bits) {
  const __half2_raw raw = __nv_cvt_fp8x2_to_halfraw2(static_cast<__nv_fp8x2_storage_t>(bits & 0xFFFF), __NV_E4M3);
  return __half22float2(__half2(raw));
}

// The vector decoded once per block into shared memory, per chunk c of the padded row (arrays of
// padded_chunks entries, in this order): int8 2b of values 0-15 and of 16-31, the dp4a start and
// sfb / 4 of both blocks, and the two -magic * sfb / 4. Lane-contiguous, so a warp's 16-byte reads
// are free of bank conflicts. Then slices x rows_cap floats: the k slices' partial sums of the
// block's rows (slices > 1 only).
struct SharedVector {
  uint4* low;
  uint4* high;
  uint4* blocks;
  uint2* unmagic;
  float* partial;

  __device__ __forceinline__ SharedVector(uint4* base, uint32_t padded_chunks) {
    low = base;
    high = base + padded_chunks;
    blocks = base + 2 * padded_chunks;
    unmagic = reinterpret_cast<uint2*>(base + 3 * padded_chunks);
    partial = reinterpret_cast<float*>(unmagic + padded_chunks);
  }
};

constexpr size_t shared_vector_bytes(uint32_t padded_chunks, uint32_t slices, uint32_t rows_cap) {
  return size_t(padded_chunks) * (3 * 16 + 8) + (slices > 1 ? size_t(slices) * rows_cap * 4 : 0);
}

// Chunk ``chunk`` of the vector (``raw``, zeros past the row) and its scale pair, decoded into ``v``.
__device__ __forceinline__ void store_vector_chunk(const uint4& raw, uint32_t scales, uint32_t chunk,
                                                   uint32_t positive, uint32_t negative, const SharedVector& v) {
  const uint32_t words[4] = {raw.x, raw.y, raw.z, raw.w};
  uint32_t b2[8];
#pragma unroll
  for (int w = 0; w < 4; ++w) decode_vector_word(words[w], positive, negative, b2[2 * w], b2[2 * w + 1]);
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

// kRows partial sums a lane -> one row total a lane: halving exchanges (lanes with the mask bit
// set keep the upper half of the rows) then a butterfly; kRows - 1 + 5 - log2(kRows) shuffles.
// The row of lane L is (L >> (5 - log2(kRows))) & (kRows - 1).
template <int kRows>
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

}  // namespace
