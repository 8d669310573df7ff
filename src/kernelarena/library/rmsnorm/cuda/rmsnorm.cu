// rmsnorm in CUDA C++: out = x * rsqrt(mean(x^2) + eps) * weight, float32 math, rounded once.
//
// Memory-bound, so the kernel's job is to read x once, write out once and keep HBM busy:
// - A row of x is copied to shared memory (cp.async, 16 bytes a copy, no registers held while in
//   flight), summed from there, and read there again for the output: one pass over HBM. Rows are
//   staged whole up to 8 copies per thread at 512 threads (32K bf16 or 16K fp32 values: 64 KB of
//   shared memory); wider rows take two passes over global memory, the second mostly from L2.
// - Staging in shared memory leaves only weight in registers (8 accesses a thread: 90 registers for
//   bf16, 64 for fp16), so an SM keeps 5 to 8 rows of 8192 values in flight; with x in registers
//   too, a thread needs 128 registers and spills.
// - weight is loaded into registers at the start, so its L2 latency overlaps x's HBM latency; it is
//   read through the read-only path and stays in L2 for every row.
// - Threads per row: the fewest (one warp at least) covering the row in 8 copies each (quack's
//   layout: 128 threads x 8 copies for 8192 bf16 values). Rows narrower than 4 warps share a block
//   of 128 threads. Few rows (fewer than two blocks per SM, the launch-bound regime): more threads
//   per row and fewer copies each, so the one round trip to memory is as short as it gets.
// - The row's sum of squares: warp shuffles, then one shared-memory step across its warps.
// - 16-byte accesses need x, out and weight 16-byte aligned and the width and row strides whole
//   numbers of vectors (checked on the host); otherwise one element per access (16 per thread),
//   copied to shared memory through registers (cp.async moves 4 bytes at least).
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
// Dynamic shared memory: blockDim.y rows of `hidden` elements.
template <typename T, int kVec, int kAccesses>
__global__ void __launch_bounds__(kRowThreads)
    rmsnorm_rows_kernel(const T* __restrict__ x, const T* __restrict__ weight, T* __restrict__ out,
                        int64_t rows, int hidden, int64_t x_stride, int64_t out_stride, float eps) {
  extern __shared__ __align__(16) unsigned char shared_bytes[];
  __shared__ float scratch[kRowThreads / 32];
  T* staged = reinterpret_cast<T*>(shared_bytes) + static_cast<int64_t>(threadIdx.y) * hidden;
  const int64_t row = static_cast<int64_t>(blockIdx.x) * blockDim.y + threadIdx.y;
  const bool live = row < rows;  // dead threads still take part in the block's reductions
  const T* x_row = x + row * x_stride;
#pragma unroll
  for (int a = 0; a < kAccesses; ++a) {
    const int col = (a * blockDim.x + threadIdx.x) * kVec;
    if (live && col < hidden) copy_to_shared<T, kVec>(staged + col, x_row + col);
  }
  Pack<T, kVec> ws[kAccesses];
#pragma unroll
  for (int a = 0; a < kAccesses; ++a) {
    const int col = (a * blockDim.x + threadIdx.x) * kVec;
    if (live && col < hidden) ws[a] = load_read_only<T, kVec>(weight + col);
  }
  cp_async_wait();
  float sum = 0.f;
#pragma unroll
  for (int a = 0; a < kAccesses; ++a) {
    const int col = (a * blockDim.x + threadIdx.x) * kVec;
    if (live && col < hidden) {
      const Pack<T, kVec> p = load<T, kVec>(staged + col);
#pragma unroll
      for (int k = 0; k < kVec; ++k) {
        const float v = to_float(p.v[k]);
        sum += v * v;
      }
    }
  }
  const float rstd = rsqrtf(row_sum(sum, scratch) / static_cast<float>(hidden) + eps);
  store_rms_staged<T, kVec, kAccesses>(staged, ws, rstd, out + row * out_stride, hidden, live);
}

// Rows too wide to stage: one block per row, two passes over x (the second mostly from L2).
template <typename T, int kVec>
__global__ void __launch_bounds__(kWideThreads)
    rmsnorm_wide_kernel(const T* __restrict__ x, const T* __restrict__ weight, T* __restrict__ out,
                        int hidden, int64_t x_stride, int64_t out_stride, float eps) {
  __shared__ float scratch[kWideThreads / 32];
  const T* x_row = x + static_cast<int64_t>(blockIdx.x) * x_stride;
  T* out_row = out + static_cast<int64_t>(blockIdx.x) * out_stride;
  const int step = blockDim.x * kVec;
  float sum = 0.f;
  for (int col = threadIdx.x * kVec; col < hidden; col += step) {
    const Pack<T, kVec> p = load<T, kVec>(x_row + col);
#pragma unroll
    for (int k = 0; k < kVec; ++k) {
      const float v = to_float(p.v[k]);
      sum += v * v;
    }
  }
  const float rstd = rsqrtf(row_sum(sum, scratch) / static_cast<float>(hidden) + eps);
  store_rms_wide<T, kVec>(x_row, weight, rstd, out_row, hidden);
}

// The tensors of one call, already checked: x and out [rows, hidden] with contiguous rows.
template <typename T>
struct Args {
  const T* x;
  const T* weight;
  T* out;
  int64_t rows;
  int hidden;
  int64_t x_stride;
  int64_t out_stride;
  float eps;
};

struct RmsNorm {
  template <typename T, int kVec, int kAccesses>
  static void rows(const Plan& p, const Args<T>& a, cudaStream_t stream) {
    const size_t shared = static_cast<size_t>(p.rows_per_block) * a.hidden * sizeof(T);
    launch_staged(rmsnorm_rows_kernel<T, kVec, kAccesses>, p, a.rows, shared, stream, a.x, a.weight, a.out, a.rows,
                  a.hidden, a.x_stride, a.out_stride, a.eps);
  }
  template <typename T, int kVec>
  static void wide(const Args<T>& a, cudaStream_t stream) {
    rmsnorm_wide_kernel<T, kVec><<<static_cast<unsigned>(a.rows), kWideThreads, 0, stream>>>(
        a.x, a.weight, a.out, a.hidden, a.x_stride, a.out_stride, a.eps);
  }
};

template <typename T>
void launch(tvm::ffi::TensorView x, tvm::ffi::TensorView weight, tvm::ffi::TensorView out, float eps,
            cudaStream_t stream) {
  const Args<T> a{data_of<T>(x), data_of<T>(weight), data_of<T>(out), x.size(0), static_cast<int>(x.size(1)),
                  x.stride(0), out.stride(0), eps};
  constexpr int kVec = 16 / sizeof(T);
  const bool vectorized = aligned16(a.x) && aligned16(a.out) && aligned16(a.weight) && a.hidden % kVec == 0 &&
                          (a.rows == 1 || (a.x_stride % kVec == 0 && a.out_stride % kVec == 0));
  launch_norm<RmsNorm, T>(a, vectorized, multiprocessors(x.device().device_id), stream);
}

}  // namespace

void run(tvm::ffi::TensorView x, tvm::ffi::TensorView weight, double eps, tvm::ffi::TensorView out) {
  TVM_FFI_ICHECK(x.ndim() == 2 && out.ndim() == 2 && weight.ndim() == 1)
      << "rmsnorm: x and out must be 2-D [rows, hidden], weight 1-D [hidden]";
  TVM_FFI_ICHECK(x.size(0) == out.size(0) && x.size(1) == out.size(1) && weight.size(0) == x.size(1))
      << "rmsnorm: out must have the shape of x and weight the width of x";
  TVM_FFI_ICHECK(x.dtype() == out.dtype() && x.dtype() == weight.dtype())
      << "rmsnorm: x, weight and out must have one dtype";
  TVM_FFI_ICHECK(x.device().device_type == kDLCUDA && out.device().device_type == kDLCUDA &&
                 weight.device().device_type == kDLCUDA)
      << "rmsnorm: x, weight and out must be on a CUDA device";
  TVM_FFI_ICHECK(x.size(1) < (int64_t{1} << 30)) << "rmsnorm: rows of 2^30 elements or more";
  TVM_FFI_ICHECK(x.size(0) < (int64_t{1} << 31)) << "rmsnorm: 2^31 rows or more";
  if (x.size(0) == 0 || x.size(1) == 0) return;
  TVM_FFI_ICHECK(x.size(1) == 1 || (x.stride(1) == 1 && out.stride(1) == 1 && weight.stride(0) == 1))
      << "rmsnorm: the last dimension of x, out and weight must be contiguous";
  auto stream = static_cast<cudaStream_t>(TVMFFIEnvGetStream(x.device().device_type, x.device().device_id));
  with_float_type(x.dtype(), "rmsnorm", [&](auto type) {
    launch<decltype(type)>(x, weight, out, static_cast<float>(eps), stream);
  });
  check_launch("rmsnorm");
}

TVM_FFI_DLL_EXPORT_TYPED_FUNC(run, run);
