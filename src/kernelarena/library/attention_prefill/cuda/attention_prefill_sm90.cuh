// The Hopper kernel of attention_prefill, FlashAttention-3's structure in plain PTX.
//
// A CTA owns work tiles of 128 query rows of one (batch, query head), one tile unless the grid is
// persistent (attention_prefill.cu), and three warpgroups:
// - warpgroup 0, the producer, gives its registers away (setmaxnreg) and one thread issues TMA
//   loads: Q once, then K and V tiles of 128 keys into a ring of kStages stages, each completing
//   on a "full" mbarrier and recycled when both consumers arrive on its "empty" mbarrier;
// - warpgroups 1 and 2, the consumers, 64 query rows each, take 240 registers and run
//   S = Q K^T (wgmma, both operands from shared memory) and O += P V (wgmma, P from registers,
//   V transposed by the descriptor), with the online softmax in registers between them.
// Inside a consumer the GEMMs of neighbouring tiles overlap the softmax: S of tile i is issued,
// then O += P V of tile i - 1, and the softmax of tile i runs while that second GEMM is in flight
// (its rescale of O waits for it). The two consumers are not forced to alternate: the warp
// schedulers interleave one's softmax with the other's GEMMs, and ping-pong (below) orders them.
//
// Tiles are stored as TMA writes them with the 128-byte swizzle: 64 columns (128 bytes) a row, a
// head dim of 128 as two such column blocks; wgmma reads them through descriptors with the same
// swizzle. Keys are visited from the last tile to the first, so the tiles that need a mask (the
// causal diagonal, the sequence's tail) come first and the rest run unmasked.
#pragma once

#include <cuda.h>

#include "attention_prefill_ptx.cuh"

// Ping-pong between the consumer warpgroups (FlashAttention-3): each issues its GEMMs only after
// the other has issued its own, so one's softmax lines up with the other's GEMMs (3-10% faster on
// an H100 but for d128 full, where it is within the spread of runs).
// Where O takes its softmax factor: 1 rescales O between issuing S = Q K^T of the next key tile
// and O += P V (FlashAttention-3's order: the multiplies run while the tensor cores work on S);
// 0 rescales after O += P V completes. 0 measured faster (1-6%), perhaps because under ping-pong
// the multiplies sit inside the warpgroup's turn and delay the other's GEMMs. The numbers:
// docs/kernels/attention_prefill_cuda.md.
#ifndef ATTENTION_PREFILL_EARLY_RESCALE
#define ATTENTION_PREFILL_EARLY_RESCALE 0
#endif

#ifndef ATTENTION_PREFILL_PINGPONG
#define ATTENTION_PREFILL_PINGPONG 1
#endif

namespace attention_prefill_sm90 {

constexpr int kBlockM = 128;  // query rows a CTA
constexpr int kBlockN = 128;  // keys a tile
constexpr int kThreads = 384;
constexpr int kColumnBlockBytes = 128 * 128;  // 128 rows of 64 16-bit columns

struct Params {
  void* o;
  float* lse;
  int64_t o_stride_b, o_stride_h, o_stride_s;  // elements
  int64_t lse_stride_b, lse_stride_h, lse_stride_s;
  int seq_q, seq_kv, q_heads, group, num_m_blocks, num_work;
  int causal_offset;  // seq_kv - seq_q: query i sees keys j <= i + causal_offset
  bool causal;
  float scale_log2;  // sm_scale * log2(e), > 0
};

template <int kHeadDim, int kStages>
struct Layout {
  static constexpr int kColumnBlocks = kHeadDim / 64;
  static constexpr int kTileBytes = kColumnBlocks * kColumnBlockBytes;  // Q, K or V tile
  static constexpr int kQ = 0;
  static constexpr int kK = kQ + kTileBytes;
  static constexpr int kV = kK + kStages * kTileBytes;
  static constexpr int kBarriers = kV + kStages * kTileBytes;
  // q_full, k_full, v_full, k_empty, v_empty per stage, q_empty
  static constexpr int kBytes = kBarriers + 8 * (2 + 4 * kStages);
  static constexpr int kDynamicBytes = kBytes + 1024;  // room to align the base to 1024
};

__device__ __forceinline__ float fast_exp2(float x) {
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;\n" : "=f"(y) : "f"(x));
  return y;
}

template <typename T>
__device__ __forceinline__ uint32_t pack2(float lo, float hi) {
  if constexpr (std::is_same_v<T, __nv_bfloat16>) {
    __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
    return *reinterpret_cast<uint32_t*>(&v);
  } else {
    __half2 v = __floats2half2_rn(lo, hi);
    return *reinterpret_cast<uint32_t*>(&v);
  }
}

// One work tile: kBlockM query rows of one (batch, query head). Tiles are numbered with the row
// block fastest (then head, then batch), so CTAs running at once share K and V through L2; under
// a causal mask the row blocks run from the last (most keys) to the first, so that the short
// ones fill the end of the grid.
struct Work {
  int m0, h, b, n_tiles;
};

__device__ __forceinline__ Work work_of(int t, const Params& p) {
  Work w;
  const int m_index = t % p.num_m_blocks;
  const int rest = t / p.num_m_blocks;
  w.h = rest % p.q_heads;
  w.b = rest / p.q_heads;
  w.m0 = (p.causal ? p.num_m_blocks - 1 - m_index : m_index) * kBlockM;
  int key_end = p.seq_kv;
  if (p.causal) key_end = min(key_end, w.m0 + kBlockM + p.causal_offset);
  w.n_tiles = key_end > 0 ? (key_end + kBlockN - 1) / kBlockN : 0;
  return w;
}

// o = 0 and lse = -inf for a consumer's 64 rows of a tile that sees no key.
template <typename T, int kHeadDim>
__device__ void write_empty_rows(const Params& p, const Work& w, int first_row, int tid) {
  T* o = static_cast<T*>(p.o) + w.b * p.o_stride_b + w.h * p.o_stride_h;
  const int rows = min(64, p.seq_q - first_row);
  for (int idx = tid; idx < rows * kHeadDim; idx += 128) {
    const int r = idx / kHeadDim, c = idx % kHeadDim;
    o[(first_row + r) * p.o_stride_s + c] = T(0.0f);
  }
  for (int r = tid; r < rows; r += 128) {
    p.lse[w.b * p.lse_stride_b + w.h * p.lse_stride_h + (first_row + r) * p.lse_stride_s] =
        -INFINITY;
  }
}

// Work tiles t = blockIdx.x, blockIdx.x + gridDim.x, ...: one a CTA when the grid has one CTA a
// tile, several when it is persistent (a CTA an SM), where the producer loads the next tile's Q
// and first K/V while the consumers finish the current one. Stage and phase counters run on
// across tiles.
template <typename T, int kHeadDim, int kStages>
__global__ void __launch_bounds__(kThreads, 1)
    attention_kernel(const __grid_constant__ CUtensorMap map_q,
                     const __grid_constant__ CUtensorMap map_k,
                     const __grid_constant__ CUtensorMap map_v, const Params p) {
  using L = Layout<kHeadDim, kStages>;
  constexpr int kOut = kHeadDim / 2;  // float accumulators of O a thread (m64 x head_dim)

  extern __shared__ uint8_t smem_raw[];
  const uint32_t base = (shared_address(smem_raw) + 1023) & ~1023u;
  const uint32_t q_full = base + L::kBarriers;
  const uint32_t q_empty = q_full + 8 * (1 + 4 * kStages);
  auto k_full = [&](int s) { return q_full + 8 * (1 + s); };
  auto v_full = [&](int s) { return q_full + 8 * (1 + kStages + s); };
  auto k_empty = [&](int s) { return q_full + 8 * (1 + 2 * kStages + s); };
  auto v_empty = [&](int s) { return q_full + 8 * (1 + 3 * kStages + s); };

  if (threadIdx.x == 0) {
    mbarrier_init(q_full, 1);
    mbarrier_init(q_empty, 8);  // one arrival a consumer warp
    for (int s = 0; s < kStages; ++s) {
      mbarrier_init(k_full(s), 1);
      mbarrier_init(v_full(s), 1);
      mbarrier_init(k_empty(s), 8);
      mbarrier_init(v_empty(s), 8);
    }
    mbarrier_init_fence();
  }
  __syncthreads();

  const int warpgroup = threadIdx.x / 128;
  if (warpgroup == 0) {
    regs_release<24>();
    if (threadIdx.x == 0) {
      tma_prefetch_descriptor(&map_q);
      tma_prefetch_descriptor(&map_k);
      tma_prefetch_descriptor(&map_v);
      int kv_iter = 0, tile_iter = 0;
      for (int t = blockIdx.x; t < p.num_work; t += gridDim.x) {
        const Work w = work_of(t, p);
        if (w.n_tiles == 0) continue;
        const int kv_h = w.h / p.group;
        mbarrier_wait(q_empty, (tile_iter & 1) ^ 1);
        mbarrier_expect_bytes(q_full, L::kTileBytes);
#pragma unroll
        for (int cb = 0; cb < L::kColumnBlocks; ++cb) {
          tma_load_4d(base + L::kQ + cb * kColumnBlockBytes, &map_q, q_full, cb * 64, w.m0, w.h,
                      w.b);
        }
        for (int i = 0; i < w.n_tiles; ++i, ++kv_iter) {
          const int n = w.n_tiles - 1 - i;
          const int s = kv_iter % kStages;
          const uint32_t parity = ((kv_iter / kStages) & 1) ^ 1;
          mbarrier_wait(k_empty(s), parity);
          mbarrier_expect_bytes(k_full(s), L::kTileBytes);
#pragma unroll
          for (int cb = 0; cb < L::kColumnBlocks; ++cb) {
            tma_load_4d(base + L::kK + s * L::kTileBytes + cb * kColumnBlockBytes, &map_k,
                        k_full(s), cb * 64, n * kBlockN, kv_h, w.b);
          }
          mbarrier_wait(v_empty(s), parity);
          mbarrier_expect_bytes(v_full(s), L::kTileBytes);
#pragma unroll
          for (int cb = 0; cb < L::kColumnBlocks; ++cb) {
            tma_load_4d(base + L::kV + s * L::kTileBytes + cb * kColumnBlockBytes, &map_v,
                        v_full(s), cb * 64, n * kBlockN, kv_h, w.b);
          }
        }
        ++tile_iter;
      }
    }
    return;
  }

  regs_acquire<240>();
  const int consumer = warpgroup - 1;
  const int tid = threadIdx.x % 128;
  const int warp = tid / 32, lane = tid % 32;
  const int row_in_tile = consumer * 64 + warp * 16 + lane / 4;  // and row_in_tile + 8
  const int col_in_block = 2 * (lane % 4);
  const float scale = p.scale_log2;
  const uint32_t q_base = base + L::kQ + consumer * 64 * 128;

  float o[kOut];
  float s[64];
  uint32_t pf[32];  // P of the previous tile, 16-bit pairs in the wgmma A fragment layout

  auto issue_qk = [&](int stage) {
    const uint32_t k_base = base + L::kK + stage * L::kTileBytes;
    wgmma_fence();
#pragma unroll
    for (int t = 0; t < kHeadDim / 16; ++t) {
      const uint32_t offset = (t / 4) * kColumnBlockBytes + (t % 4) * 32;
      wgmma_ss_m64n128<T>(s, smem_desc(q_base + offset, 16, 1024),
                          smem_desc(k_base + offset, 16, 1024), t > 0);
    }
    wgmma_commit();
  };

  auto issue_pv = [&](int stage) {
    const uint32_t v_base = base + L::kV + stage * L::kTileBytes;
    wgmma_fence();
#pragma unroll
    for (int t = 0; t < kBlockN / 16; ++t) {
      const uint32_t a[4] = {pf[4 * t], pf[4 * t + 1], pf[4 * t + 2], pf[4 * t + 3]};
      const uint64_t desc = smem_desc(v_base + t * 16 * 128, kColumnBlockBytes, 1024);
      if constexpr (kHeadDim == 128) {
        wgmma_rs_m64n128<T>(o, a, desc);
      } else {
        wgmma_rs_m64n64<T>(o, a, desc);
      }
    }
    wgmma_commit();
  };

  auto to_p = [&]() {
#pragma unroll
    for (int i = 0; i < 32; ++i) pf[i] = pack2<T>(s[2 * i], s[2 * i + 1]);
  };

  // Named barriers 1 and 2: consumer c waits on 1 + c for its turn to issue GEMMs and passes
  // the turn on 2 - c. Consumer 1 passes first so that consumer 0 starts; consumer 0 takes
  // consumer 1's last pass after the last tile, so that no arrival is left pending.
  auto turn_wait = [&]() {
    if constexpr (ATTENTION_PREFILL_PINGPONG) named_barrier_sync(1 + consumer, 256);
  };
  auto turn_pass = [&]() {
    if constexpr (ATTENTION_PREFILL_PINGPONG) named_barrier_arrive(2 - consumer, 256);
  };
  if (consumer == 1) turn_pass();

  int kv_iter = 0, tile_iter = 0;
  for (int t = blockIdx.x; t < p.num_work; t += gridDim.x) {
    const Work w = work_of(t, p);
    const int rows[2] = {w.m0 + row_in_tile, w.m0 + row_in_tile + 8};
    if (w.n_tiles == 0) {
      write_empty_rows<T, kHeadDim>(p, w, w.m0 + consumer * 64, tid);
      continue;
    }
    float row_max[2] = {-INFINITY, -INFINITY};  // of the scaled scores, log2 units
    float row_sum[2] = {0.0f, 0.0f};            // this thread's share; the quad adds up at the end
#pragma unroll
    for (int i = 0; i < kOut; ++i) o[i] = 0.0f;

    // Masks key tile n where it must, then turns s into exp2(s * scale - max) in place and
    // updates the running max and sums; returns each row's factor for the O accumulated so far.
    auto softmax = [&](int n, float (&alpha)[2]) {
      const int key0 = n * kBlockN;
      const bool masked = key0 + kBlockN > p.seq_kv ||
                          (p.causal && key0 + kBlockN - 1 > w.m0 + p.causal_offset);
      if (masked) {
#pragma unroll
        for (int i = 0; i < 64; ++i) {
          const int key = key0 + (i / 4) * 8 + col_in_block + (i % 2);
          const int row = rows[(i / 2) % 2];
          if (key >= p.seq_kv || (p.causal && key > row + p.causal_offset)) s[i] = -INFINITY;
        }
      }
#pragma unroll
      for (int r = 0; r < 2; ++r) {
        float mx = -INFINITY;
#pragma unroll
        for (int j = 0; j < 16; ++j) {
          mx = fmaxf(mx, fmaxf(s[4 * j + 2 * r], s[4 * j + 2 * r + 1]));
        }
        mx = fmaxf(mx, __shfl_xor_sync(0xffffffff, mx, 1));
        mx = fmaxf(mx, __shfl_xor_sync(0xffffffff, mx, 2));
        const float new_max = fmaxf(row_max[r], mx * scale);
        // A row that has seen no key yet keeps max -inf; exponents then use 0 so that exp2
        // gives 0 rather than NaN.
        const float use_max = new_max == -INFINITY ? 0.0f : new_max;
        alpha[r] = fast_exp2(row_max[r] - use_max);
        row_max[r] = new_max;
        float sum = 0.0f;
#pragma unroll
        for (int j = 0; j < 16; ++j) {
#pragma unroll
          for (int e = 0; e < 2; ++e) {
            const int i = 4 * j + 2 * r + e;
            s[i] = fast_exp2(fmaf(s[i], scale, -use_max));
            sum += s[i];
          }
        }
        row_sum[r] = row_sum[r] * alpha[r] + sum;
      }
    };

    mbarrier_wait(q_full, tile_iter & 1);
    float alpha[2];  // the last softmax's factors for O
    auto rescale_o = [&]() {
#pragma unroll
      for (int j = 0; j < kOut; ++j) o[j] *= alpha[(j / 2) % 2];
    };

    // Key tile 0 (the last keys): S, softmax, P.
    {
      const int stage = kv_iter % kStages;
      mbarrier_wait(k_full(stage), (kv_iter / kStages) & 1);
      turn_wait();
      issue_qk(stage);
      turn_pass();
      wgmma_wait<0>();
      fence_registers(s);
      if (lane == 0) {
        mbarrier_arrive(k_empty(stage));
        if (w.n_tiles == 1) mbarrier_arrive(q_empty);  // the producer may load the next Q
      }
      softmax(w.n_tiles - 1, alpha);  // alpha is 0 here, and so is O
      to_p();
    }

    for (int i = 1; i < w.n_tiles; ++i) {
      const int it = kv_iter + i;
      const int stage = it % kStages;
      const int prev = (it - 1) % kStages;
      mbarrier_wait(k_full(stage), (it / kStages) & 1);
      turn_wait();
      issue_qk(stage);
      if constexpr (ATTENTION_PREFILL_EARLY_RESCALE) rescale_o();
      mbarrier_wait(v_full(prev), ((it - 1) / kStages) & 1);
      fence_registers(pf);
      issue_pv(prev);
      turn_pass();
      wgmma_wait<1>();  // S of key tile i is in; O += P V of key tile i - 1 still runs
      fence_registers(s);
      if (lane == 0) {
        mbarrier_arrive(k_empty(stage));
        if (i == w.n_tiles - 1) mbarrier_arrive(q_empty);
      }
      softmax(w.n_tiles - 1 - i, alpha);
      wgmma_wait<0>();
      fence_registers(o);
      fence_registers(s);
      fence_registers(pf);
      if (lane == 0) mbarrier_arrive(v_empty(prev));
      if constexpr (!ATTENTION_PREFILL_EARLY_RESCALE) rescale_o();
      to_p();
    }

    {
      const int it = kv_iter + w.n_tiles - 1;
      const int last = it % kStages;
      if constexpr (ATTENTION_PREFILL_EARLY_RESCALE) rescale_o();
      mbarrier_wait(v_full(last), (it / kStages) & 1);
      fence_registers(pf);
      fence_registers(o);
      turn_wait();
      issue_pv(last);
      turn_pass();
      wgmma_wait<0>();
      fence_registers(o);
      if (lane == 0) mbarrier_arrive(v_empty(last));
    }
    kv_iter += w.n_tiles;
    ++tile_iter;

    // Epilogue: the quad's partial sums, o / sum, lse; rows past seq_q are not written.
    T* out = static_cast<T*>(p.o) + w.b * p.o_stride_b + w.h * p.o_stride_h;
    constexpr float kLn2 = 0.6931471805599453f;
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      float sum = row_sum[r];
      sum += __shfl_xor_sync(0xffffffff, sum, 1);
      sum += __shfl_xor_sync(0xffffffff, sum, 2);
      const float inv = sum > 0.0f ? 1.0f / sum : 0.0f;
      const int row = rows[r];
      if (row < p.seq_q) {
        T* line = out + row * p.o_stride_s + col_in_block;
#pragma unroll
        for (int j = 0; j < kHeadDim / 8; ++j) {
          const uint32_t v = pack2<T>(o[4 * j + 2 * r] * inv, o[4 * j + 2 * r + 1] * inv);
          *reinterpret_cast<uint32_t*>(line + 8 * j) = v;
        }
        if (lane % 4 == 0) {
          p.lse[w.b * p.lse_stride_b + w.h * p.lse_stride_h + row * p.lse_stride_s] =
              sum > 0.0f ? row_max[r] * kLn2 + logf(sum) : -INFINITY;
        }
      }
    }
  }
  if (consumer == 0) turn_wait();
}

}  // namespace attention_prefill_sm90
