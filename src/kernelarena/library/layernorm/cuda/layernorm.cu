// layernorm in CUDA C++: out = (x - mean) * rsqrt(var + eps) * weight + bias, float32 math, rounded
// once; mean and (biased) variance in float32, the variance from x - mean.
//
// Memory-bound, so the kernel's job is to read x once, write out once and keep HBM busy:
// - A row of x is copied to shared memory (cp.async, 16 bytes a copy, no registers held while in
//   flight) and read there three times: for the mean, for the variance of x - mean (exact, no
//   cancellation when the mean is large against the spread), and for the output. One pass over HBM.
//   Rows are staged whole up to 8 copies per thread at 512 threads (32K bf16, 16K fp32 values: 64
//   KB, and as much again for bias); wider rows take two passes over global memory, with sums of
//   x - x[0] and its square.
// - weight is loaded into registers at the start, so its L2 latency overlaps x's HBM latency; bias
//   is copied to shared memory at the start (cp.async, with x), one copy per block, and read from
//   there for the output. (Held in registers beside weight it spills for 8 accesses of bf16; loaded
//   into registers after the reductions it costs every row an exposed L2 round trip and 128
//   registers a thread (ptxas, bf16, 8192 wide), so 4 blocks per SM: 78% of the copy bandwidth at
//   32768x8192 on an H200. Staged: 94 registers and 32 KB of shared memory, 5 blocks per SM; see
//   docs/kernels/layernorm.md.) weight and bias stay in L2 for every row.
// - Threads per row: the fewest (one warp at least) covering the row in 8 copies each; rows
//   narrower than 4 warps share a block of 128 threads; few rows (launch-bound) spread wider.
// - Row sums: warp shuffles, then one shared-memory step across the row's warps.
// - 16-byte accesses need x, out, weight and bias 16-byte aligned and the width and row strides
//   whole numbers of vectors (checked on the host); otherwise one element per access.
// - Stores keep the default cache policy: out is the next kernel's input.
#include <cuda_runtime.h>
#include <tvm/ffi/container/tensor.h>
#include <tvm/ffi/error.h>
#include <tvm/ffi/extra/c_env_api.h>
#include <tvm/ffi/function.h>

#include <cstdint>

#include "_shared/norm_rows.cuh"
#include "_shared/reduce.cuh"
#include "_shared/vector_io.cuh"

namespace {

// blockDim.y rows per block, blockDim.x threads per row; access a of a thread covers the kVec
// elements from column (a * blockDim.x + threadIdx.x) * kVec, so a warp moves 512 contiguous bytes.
// Dynamic shared memory: blockDim.y rows of `hidden` elements, then bias (`hidden` elements).
template <typename T, int kVec, int kAccesses>
__global__ void __launch_bounds__(kRowThreads)
    layernorm_rows_kernel(const T* __restrict__ x, const T* __restrict__ weight, const T* __restrict__ bias,
                          T* __restrict__ out, int64_t rows, int hidden, int64_t x_stride, int64_t out_stride,
                          float eps) {
  extern __shared__ __align__(16) unsigned char shared_bytes[];
  __shared__ float scratch[kRowThreads / 32];
  T* staged = reinterpret_cast<T*>(shared_bytes) + static_cast<int64_t>(threadIdx.y) * hidden;
  T* staged_bias = reinterpret_cast<T*>(shared_bytes) + static_cast<int64_t>(blockDim.y) * hidden;
  const int64_t row = static_cast<int64_t>(blockIdx.x) * blockDim.y + threadIdx.y;
  const bool live = row < rows;  // dead threads still take part in the block's reductions
  const T* x_row = x + row * x_stride;
#pragma unroll
  for (int a = 0; a < kAccesses; ++a) {
    const int col = (a * blockDim.x + threadIdx.x) * kVec;
    if (live && col < hidden) copy_to_shared<T, kVec>(staged + col, x_row + col);
  }
  // bias, once per block, by all its threads (read back by others: the barrier below).
  const int block_threads = blockDim.x * blockDim.y;
  for (int col = (threadIdx.y * blockDim.x + threadIdx.x) * kVec; col < hidden;
       col += block_threads * kVec) {
    copy_to_shared<T, kVec>(staged_bias + col, bias + col);
  }
  Pack<T, kVec> ws[kAccesses];
#pragma unroll
  for (int a = 0; a < kAccesses; ++a) {
    const int col = (a * blockDim.x + threadIdx.x) * kVec;
    if (live && col < hidden) ws[a] = load_read_only<T, kVec>(weight + col);
  }
  cp_async_wait();
  __syncthreads();  // staged_bias is complete
  float sum = 0.f;
#pragma unroll
  for (int a = 0; a < kAccesses; ++a) {
    const int col = (a * blockDim.x + threadIdx.x) * kVec;
    if (live && col < hidden) {
      const Pack<T, kVec> p = load<T, kVec>(staged + col);
#pragma unroll
      for (int k = 0; k < kVec; ++k) sum += to_float(p.v[k]);
    }
  }
  const float mean = row_sum(sum, scratch) / static_cast<float>(hidden);
  float sum_sq = 0.f;
#pragma unroll
  for (int a = 0; a < kAccesses; ++a) {
    const int col = (a * blockDim.x + threadIdx.x) * kVec;
    if (live && col < hidden) {
      const Pack<T, kVec> p = load<T, kVec>(staged + col);
#pragma unroll
      for (int k = 0; k < kVec; ++k) {
        const float d = to_float(p.v[k]) - mean;
        sum_sq += d * d;
      }
    }
  }
  const float rstd = rsqrtf(row_sum(sum_sq, scratch) / static_cast<float>(hidden) + eps);
  T* out_row = out + row * out_stride;
#pragma unroll
  for (int a = 0; a < kAccesses; ++a) {
    const int col = (a * blockDim.x + threadIdx.x) * kVec;
    if (live && col < hidden) {
      const Pack<T, kVec> p = load<T, kVec>(staged + col);
      const Pack<T, kVec> b = load<T, kVec>(staged_bias + col);
      Pack<T, kVec> y;
#pragma unroll
      for (int k = 0; k < kVec; ++k) {
        y.v[k] = from_float<T>((to_float(p.v[k]) - mean) * rstd * to_float(ws[a].v[k]) + to_float(b.v[k]));
      }
      store<T, kVec>(out_row + col, y);
    }
  }
}

// Rows too wide to stage: one block per row, two passes over x (the second mostly from L2). The
// variance comes from sums of d = x - x[0] and d^2: shifted by a value of the row, so a mean large
// against the spread does not cancel.
template <typename T, int kVec>
__global__ void __launch_bounds__(kWideThreads)
    layernorm_wide_kernel(const T* __restrict__ x, const T* __restrict__ weight, const T* __restrict__ bias,
                          T* __restrict__ out, int hidden, int64_t x_stride, int64_t out_stride, float eps) {
  __shared__ float scratch[kWideThreads / 32];
  const T* x_row = x + static_cast<int64_t>(blockIdx.x) * x_stride;
  T* out_row = out + static_cast<int64_t>(blockIdx.x) * out_stride;
  const float shift = to_float(x_row[0]);
  const int step = blockDim.x * kVec;
  float sum = 0.f, sum_sq = 0.f;
  for (int col = threadIdx.x * kVec; col < hidden; col += step) {
    const Pack<T, kVec> p = load<T, kVec>(x_row + col);
#pragma unroll
    for (int k = 0; k < kVec; ++k) {
      const float d = to_float(p.v[k]) - shift;
      sum += d;
      sum_sq += d * d;
    }
  }
  const float mean_shifted = row_sum(sum, scratch) / static_cast<float>(hidden);
  const float var = fmaxf(row_sum(sum_sq, scratch) / static_cast<float>(hidden) - mean_shifted * mean_shifted, 0.f);
  const float mean = shift + mean_shifted;
  const float rstd = rsqrtf(var + eps);
  for (int col = threadIdx.x * kVec; col < hidden; col += step) {
    const Pack<T, kVec> p = load<T, kVec>(x_row + col);
    const Pack<T, kVec> w = load_read_only<T, kVec>(weight + col);
    const Pack<T, kVec> b = load_read_only<T, kVec>(bias + col);
    Pack<T, kVec> y;
#pragma unroll
    for (int k = 0; k < kVec; ++k) y.v[k] = from_float<T>((to_float(p.v[k]) - mean) * rstd * to_float(w.v[k]) + to_float(b.v[k]));
    store<T, kVec>(out_row + col, y);
  }
}

// The tensors of one call, already checked: x and out [rows, hidden] with contiguous rows.
template <typename T>
struct Args {
  const T* x;
  const T* weight;
  const T* bias;
  T* out;
  int64_t rows;
  int hidden;
  int64_t x_stride;
  int64_t out_stride;
  float eps;
};

struct LayerNorm {
  template <typename T, int kVec, int kAccesses>
  static void rows(const Plan& p, const Args<T>& a, cudaStream_t stream) {
    // The block's rows, then bias.
    const size_t shared = static_cast<size_t>(p.rows_per_block + 1) * a.hidden * sizeof(T);
    launch_staged(layernorm_rows_kernel<T, kVec, kAccesses>, p, a.rows, shared, stream, a.x, a.weight, a.bias, a.out,
                  a.rows, a.hidden, a.x_stride, a.out_stride, a.eps);
  }
  template <typename T, int kVec>
  static void wide(const Args<T>& a, cudaStream_t stream) {
    layernorm_wide_kernel<T, kVec><<<static_cast<unsigned>(a.rows), kWideThreads, 0, stream>>>(
        a.x, a.weight, a.bias, a.out, a.hidden, a.x_stride, a.out_stride, a.eps);
  }
};

template <typename T>
void launch(tvm::ffi::TensorView x, tvm::ffi::TensorView weight, tvm::ffi::TensorView bias, tvm::ffi::TensorView out,
            float eps, cudaStream_t stream) {
  const Args<T> a{data_of<T>(x), data_of<T>(weight), data_of<T>(bias), data_of<T>(out), x.size(0),
                  static_cast<int>(x.size(1)), x.stride(0), out.stride(0), eps};
  constexpr int kVec = 16 / sizeof(T);
  const bool vectorized = aligned16(a.x) && aligned16(a.weight) && aligned16(a.bias) && aligned16(a.out) &&
                          a.hidden % kVec == 0 &&
                          (a.rows == 1 || (a.x_stride % kVec == 0 && a.out_stride % kVec == 0));
  launch_norm<LayerNorm, T>(a, vectorized, multiprocessors(x.device().device_id), stream);
}

}  // namespace

void run(tvm::ffi::TensorView x, tvm::ffi::TensorView weight, tvm::ffi::TensorView bias, double eps,
         tvm::ffi::TensorView out) {
  TVM_FFI_ICHECK(x.ndim() == 2 && out.ndim() == 2 && weight.ndim() == 1 && bias.ndim() == 1)
      << "layernorm: x and out must be 2-D [rows, hidden], weight and bias 1-D [hidden]";
  TVM_FFI_ICHECK(x.size(0) == out.size(0) && x.size(1) == out.size(1) && weight.size(0) == x.size(1) &&
                 bias.size(0) == x.size(1))
      << "layernorm: out must have the shape of x, weight and bias the width of x";
  TVM_FFI_ICHECK(x.dtype() == out.dtype() && x.dtype() == weight.dtype() && x.dtype() == bias.dtype())
      << "layernorm: x, weight, bias and out must have one dtype";
  TVM_FFI_ICHECK(x.device().device_type == kDLCUDA && out.device().device_type == kDLCUDA &&
                 weight.device().device_type == kDLCUDA && bias.device().device_type == kDLCUDA)
      << "layernorm: x, weight, bias and out must be on a CUDA device";
  TVM_FFI_ICHECK(x.size(1) < (int64_t{1} << 30)) << "layernorm: rows of 2^30 elements or more";
  TVM_FFI_ICHECK(x.size(0) < (int64_t{1} << 31)) << "layernorm: 2^31 rows or more";
  if (x.size(0) == 0 || x.size(1) == 0) return;
  TVM_FFI_ICHECK(x.size(1) == 1 || (x.stride(1) == 1 && out.stride(1) == 1 && weight.stride(0) == 1 &&
                                    bias.stride(0) == 1))
      << "layernorm: the last dimension of x, out, weight and bias must be contiguous";
  auto stream = static_cast<cudaStream_t>(TVMFFIEnvGetStream(x.device().device_type, x.device().device_id));
  with_float_type(x.dtype(), "layernorm", [&](auto type) {
    launch<decltype(type)>(x, weight, bias, out, static_cast<float>(eps), stream);
  });
  check_launch("layernorm");
}

TVM_FFI_DLL_EXPORT_TYPED_FUNC(run, run);
