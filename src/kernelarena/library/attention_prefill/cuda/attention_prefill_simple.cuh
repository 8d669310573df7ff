// The portable path of attention_prefill: one warp a query row, keys one at a time, the online
// softmax in float32 (P is not rounded to 16 bits here). For what the Hopper kernel does not take:
// strides TMA cannot describe (not multiples of 16 bytes, unaligned bases), a non-positive
// sm_scale, grids too large for its launch, head dims other than 64 and 128. Slow (no tensor
// cores, every key read by every query row) but right for any valid input.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>

namespace attention_prefill_simple {

struct Params {
  const void* q;
  const void* k;
  const void* v;
  void* o;
  float* lse;
  int64_t q_stride[3], k_stride[3], v_stride[3], o_stride[3], lse_stride[3];  // b, h, s (elements)
  int64_t total_rows;  // batch * q_heads * seq_q
  int q_heads, seq_q, seq_kv, head_dim, group;
  int causal_offset;
  bool causal;
  float sm_scale;
};

template <int kPerLane, typename T>
__global__ void __launch_bounds__(128) attention_simple_kernel(const Params p) {
  const int64_t row_id = (static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x) / 32;
  const int lane = threadIdx.x % 32;
  if (row_id >= p.total_rows) return;
  const int i = static_cast<int>(row_id % p.seq_q);
  const int h = static_cast<int>((row_id / p.seq_q) % p.q_heads);
  const int b = static_cast<int>(row_id / (static_cast<int64_t>(p.seq_q) * p.q_heads));
  const int kv_h = h / p.group;

  const T* q = static_cast<const T*>(p.q) + b * p.q_stride[0] + h * p.q_stride[1] + i * p.q_stride[2];
  const T* k = static_cast<const T*>(p.k) + b * p.k_stride[0] + kv_h * p.k_stride[1];
  const T* v = static_cast<const T*>(p.v) + b * p.v_stride[0] + kv_h * p.v_stride[1];

  float qr[kPerLane], acc[kPerLane];
#pragma unroll
  for (int e = 0; e < kPerLane; ++e) {
    const int d = lane + 32 * e;
    qr[e] = d < p.head_dim ? static_cast<float>(q[d]) : 0.0f;
    acc[e] = 0.0f;
  }
  int key_end = p.seq_kv;
  if (p.causal) key_end = min(key_end, i + p.causal_offset + 1);

  float row_max = -INFINITY, row_sum = 0.0f;
  for (int j = 0; j < key_end; ++j) {
    const T* kj = k + j * p.k_stride[2];
    float dot = 0.0f;
#pragma unroll
    for (int e = 0; e < kPerLane; ++e) {
      const int d = lane + 32 * e;
      if (d < p.head_dim) dot += qr[e] * static_cast<float>(kj[d]);
    }
#pragma unroll
    for (int offset = 16; offset > 0; offset /= 2) dot += __shfl_xor_sync(0xffffffff, dot, offset);
    const float score = dot * p.sm_scale;
    const float new_max = fmaxf(row_max, score);
    const float alpha = expf(row_max - new_max);  // exp(-inf) = 0 on the first key
    const float weight = expf(score - new_max);
    row_sum = row_sum * alpha + weight;
    row_max = new_max;
    const T* vj = v + j * p.v_stride[2];
#pragma unroll
    for (int e = 0; e < kPerLane; ++e) {
      const int d = lane + 32 * e;
      acc[e] = acc[e] * alpha + (d < p.head_dim ? weight * static_cast<float>(vj[d]) : 0.0f);
    }
  }

  T* o = static_cast<T*>(p.o) + b * p.o_stride[0] + h * p.o_stride[1] + i * p.o_stride[2];
  const float inv = row_sum > 0.0f ? 1.0f / row_sum : 0.0f;
#pragma unroll
  for (int e = 0; e < kPerLane; ++e) {
    const int d = lane + 32 * e;
    if (d < p.head_dim) o[d] = static_cast<T>(acc[e] * inv);
  }
  if (lane == 0) {
    p.lse[b * p.lse_stride[0] + h * p.lse_stride[1] + i * p.lse_stride[2]] =
        row_sum > 0.0f ? row_max + logf(row_sum) : -INFINITY;
  }
}

}  // namespace attention_prefill_simple
