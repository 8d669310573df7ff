// Sums across threads for the library's row kernels.
#pragma once

namespace {

__device__ __forceinline__ float warp_sum(float v) {
#pragma unroll
  for (int offset = 16; offset > 0; offset >>= 1) v += __shfl_xor_sync(0xffffffffu, v, offset);
  return v;
}

// Sum of v over the blockDim.x threads of this row (a multiple of 32; row threadIdx.y of the
// block); every thread gets it. ``scratch`` holds blockDim.x / 32 floats a row. All threads of the
// block must call it (it may synchronize the block).
__device__ __forceinline__ float row_sum(float v, float* scratch) {
  v = warp_sum(v);
  const int warps = blockDim.x >> 5;
  if (warps == 1) return v;
  const int lane = threadIdx.x & 31;
  float* row_scratch = scratch + threadIdx.y * warps;
  if (lane == 0) row_scratch[threadIdx.x >> 5] = v;
  __syncthreads();
  v = warp_sum(lane < warps ? row_scratch[lane] : 0.f);
  __syncthreads();  // scratch is free for the next reduction
  return v;
}

}  // namespace
