// The launch plan of the library's CUDA row norms (rmsnorm, layernorm, fused_add_rmsnorm): one
// template, the kernels apart; and the output pass the two RMS norms share.
//
// A norm brings a kernel that stages whole rows in shared memory (blockDim.y rows a block,
// blockDim.x threads a row, kAccesses accesses of kVec elements a thread; access a of a thread
// covers the kVec elements from column (a * blockDim.x + threadIdx.x) * kVec, so a warp moves 512
// contiguous bytes) and one for rows too wide to stage (one block of kWideThreads a row, two passes
// over global memory). ``launch_norm`` picks the plan:
// - Threads per row: the fewest (one warp at least) covering the row in kVectorAccesses accesses
//   each (quack's layout: 128 threads x 8 copies for 8192 bf16 values). Rows narrower than 4 warps
//   share a block of kBlockThreads. Few rows (fewer than two blocks per SM, the launch-bound
//   regime): more threads per row and fewer accesses each, so the one round trip to memory is as
//   short as it gets.
// - 16-byte accesses in tiers of 1, 2, 4 and 8 a thread, so narrow rows hold few registers; one
//   element per access (unaligned data, or a width not a whole number of vectors) in one tier.
#pragma once

#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>

#include "_shared/device.cuh"
#include "_shared/vector_io.cuh"

namespace {

constexpr int kVectorAccesses = 8;   // 16-byte accesses per thread, at most, for a staged row
constexpr int kScalarAccesses = 16;  // one-element accesses per thread, at most
constexpr int kRowThreads = 512;     // threads per row, at most, for a staged row
constexpr int kWideThreads = 1024;
constexpr int kBlockThreads = 128;   // at least this many threads per block (rows share a block)

struct Plan {
  int threads;  // per row; 0: the row is too wide to stage (wide kernel)
  int rows_per_block;
  int accesses;  // per thread
};

inline Plan plan(int64_t rows, int64_t packs_per_row, int max_accesses, int sms) {
  int64_t threads = 32;
  while (threads < kRowThreads && threads * max_accesses < packs_per_row) threads *= 2;
  if (threads * max_accesses < packs_per_row) return {0, 1, 0};
  auto rows_per_block = [&] { return std::max<int64_t>(1, kBlockThreads / threads); };
  // Launch-bound shapes: widen while each thread keeps two accesses at least.
  while (threads < kRowThreads && ceil_div(rows, rows_per_block()) < 2 * sms && threads * 4 <= packs_per_row) {
    threads *= 2;
  }
  int accesses = 1;
  while (accesses * threads < packs_per_row) accesses *= 2;
  return {static_cast<int>(threads), static_cast<int>(rows_per_block()), accesses};
}

// Launches a staging kernel on plan ``p`` with ``shared`` bytes of dynamic shared memory.
template <typename... Params, typename... Args>
void launch_staged(void (*kernel)(Params...), const Plan& p, int64_t rows, size_t shared, cudaStream_t stream,
                   Args... args) {
  // Past 48 KB of shared memory a block (static scratch included) must opt in (Hopper: 227 KB).
  if (shared + sizeof(float) * (kRowThreads / 32) > 48 * 1024) {
    cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(shared));
  }
  const dim3 grid(static_cast<unsigned>(ceil_div(rows, p.rows_per_block)));
  const dim3 block(p.threads, p.rows_per_block);
  kernel<<<grid, block, shared, stream>>>(args...);
}

// The RMS norms' output (rmsnorm, fused_add_rmsnorm): out = row * rstd * weight, in float32 and
// rounded once. From a staged row: this thread's kAccesses accesses, in the staging layout above,
// with the weight already in registers (loaded before the reduction, so its L2 latency hides under
// the row's).
template <typename T, int kVec, int kAccesses>
__device__ __forceinline__ void store_rms_staged(const T* staged, const Pack<T, kVec> (&weights)[kAccesses], float rstd,
                                                 T* out_row, int hidden, bool live) {
#pragma unroll
  for (int a = 0; a < kAccesses; ++a) {
    const int col = (a * blockDim.x + threadIdx.x) * kVec;
    if (live && col < hidden) {
      const Pack<T, kVec> p = load<T, kVec>(staged + col);
      Pack<T, kVec> y;
#pragma unroll
      for (int k = 0; k < kVec; ++k) y.v[k] = from_float<T>(to_float(p.v[k]) * rstd * to_float(weights[a].v[k]));
      store<T, kVec>(out_row + col, y);
    }
  }
}

// The same from a row too wide to stage (one block a row, this thread's columns of it): the wide
// kernels' second pass, reading the row and the weight again.
template <typename T, int kVec>
__device__ __forceinline__ void store_rms_wide(const T* row, const T* __restrict__ weight, float rstd, T* out_row,
                                               int hidden) {
  const int step = blockDim.x * kVec;
  for (int col = threadIdx.x * kVec; col < hidden; col += step) {
    const Pack<T, kVec> p = load<T, kVec>(row + col);
    const Pack<T, kVec> w = load_read_only<T, kVec>(weight + col);
    Pack<T, kVec> y;
#pragma unroll
    for (int k = 0; k < kVec; ++k) y.v[k] = from_float<T>(to_float(p.v[k]) * rstd * to_float(w.v[k]));
    store<T, kVec>(out_row + col, y);
  }
}

// ``Norm`` launches its kernels: Norm::rows<T, kVec, kAccesses>(plan, args, stream) and
// Norm::wide<T, kVec>(args, stream); ``args`` (its own struct) has ``rows`` and ``hidden``.
template <typename Norm, typename T, typename Args>
void launch_norm(const Args& a, bool vectorized, int sms, cudaStream_t stream) {
  if (!vectorized) {
    const Plan p = plan(a.rows, a.hidden, kScalarAccesses, sms);
    if (p.threads == 0) return Norm::template wide<T, 1>(a, stream);
    return Norm::template rows<T, 1, kScalarAccesses>(p, a, stream);
  }
  constexpr int kVec = 16 / sizeof(T);
  const Plan p = plan(a.rows, a.hidden / kVec, kVectorAccesses, sms);
  if (p.threads == 0) return Norm::template wide<T, kVec>(a, stream);
  if (p.accesses == 1) return Norm::template rows<T, kVec, 1>(p, a, stream);
  if (p.accesses == 2) return Norm::template rows<T, kVec, 2>(p, a, stream);
  if (p.accesses == 4) return Norm::template rows<T, kVec, 4>(p, a, stream);
  Norm::template rows<T, kVec, kVectorAccesses>(p, a, stream);
}

}  // namespace
