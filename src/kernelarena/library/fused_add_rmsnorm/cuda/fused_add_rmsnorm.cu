// fused_add_rmsnorm in CUDA C++: residual_out = x + residual, added in float32 and rounded once to
// the storage dtype; out = residual_out * rsqrt(mean(residual_out^2) + eps) * weight, float32 math,
// rounded once. `run` writes out and residual_out; `run_inplace` writes them into x and residual.
//
// Memory-bound (two rows read, two written), so the kernel's job is one pass over HBM:
// - The rows of x and residual are copied to shared memory (cp.async, 16 bytes a copy, no registers
//   held while in flight). The rounded sum is written to residual_out as soon as it is formed and
//   kept in shared memory over x for the output: 32 KB a row of 8192 bf16, 4 rows in flight an SM
//   (108 registers a thread at 8 accesses). Rows are staged whole up to 8 copies per thread at 512
//   threads (32K bf16, 16K fp32 values); wider rows take two passes, the second reading
//   residual_out back (mostly from L2).
// - weight is loaded into registers at the start, so its L2 latency overlaps x's HBM latency.
// - Threads per row: the fewest (one warp at least) covering the row in 8 copies each; rows
//   narrower than 4 warps share a block of 128 threads; few rows (launch-bound) spread wider.
// - In place (out aliases x, residual_out aliases residual): a thread writes only elements it has
//   already read (the copies complete before any store), and blocks own disjoint rows, so x,
//   residual, out and residual_out carry no __restrict__; weight does.
// - 16-byte accesses need every tensor 16-byte aligned and the width and row strides whole numbers
//   of vectors (checked on the host); otherwise one element per access, staged through registers.
// - Stores keep the default cache policy: out and residual_out are the next kernels' inputs.
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

// Row strides of the four [rows, hidden] tensors, in elements.
struct Strides {
  int64_t x, residual, out, residual_out;
};

// blockDim.y rows per block, blockDim.x threads per row; access a of a thread covers the kVec
// elements from column (a * blockDim.x + threadIdx.x) * kVec, so a warp moves 512 contiguous bytes.
// Dynamic shared memory: blockDim.y rows of 2 * `hidden` elements (x, then residual).
template <typename T, int kVec, int kAccesses>
__global__ void __launch_bounds__(kRowThreads)
    fused_add_rmsnorm_rows_kernel(const T* x, const T* residual, const T* __restrict__ weight, T* out,
                                  T* residual_out, int64_t rows, int hidden, Strides strides, float eps) {
  extern __shared__ __align__(16) unsigned char shared_bytes[];
  __shared__ float scratch[kRowThreads / 32];
  T* staged_x = reinterpret_cast<T*>(shared_bytes) + static_cast<int64_t>(threadIdx.y) * 2 * hidden;
  T* staged_r = staged_x + hidden;
  const int64_t row = static_cast<int64_t>(blockIdx.x) * blockDim.y + threadIdx.y;
  const bool live = row < rows;  // dead threads still take part in the block's reductions
  const T* x_row = x + row * strides.x;
  const T* r_row = residual + row * strides.residual;
#pragma unroll
  for (int a = 0; a < kAccesses; ++a) {
    const int col = (a * blockDim.x + threadIdx.x) * kVec;
    if (live && col < hidden) {
      copy_to_shared<T, kVec>(staged_x + col, x_row + col);
      copy_to_shared<T, kVec>(staged_r + col, r_row + col);
    }
  }
  Pack<T, kVec> ws[kAccesses];
#pragma unroll
  for (int a = 0; a < kAccesses; ++a) {
    const int col = (a * blockDim.x + threadIdx.x) * kVec;
    if (live && col < hidden) ws[a] = load_read_only<T, kVec>(weight + col);
  }
  cp_async_wait();
  T* r_out_row = residual_out + row * strides.residual_out;
  float sum = 0.f;
#pragma unroll
  for (int a = 0; a < kAccesses; ++a) {
    const int col = (a * blockDim.x + threadIdx.x) * kVec;
    if (live && col < hidden) {
      const Pack<T, kVec> px = load<T, kVec>(staged_x + col);
      const Pack<T, kVec> pr = load<T, kVec>(staged_r + col);
      Pack<T, kVec> s;
#pragma unroll
      for (int k = 0; k < kVec; ++k) {
        s.v[k] = from_float<T>(to_float(px.v[k]) + to_float(pr.v[k]));
        const float v = to_float(s.v[k]);
        sum += v * v;
      }
      store<T, kVec>(r_out_row + col, s);
      store<T, kVec>(staged_x + col, s);
    }
  }
  const float rstd = rsqrtf(row_sum(sum, scratch) / static_cast<float>(hidden) + eps);
  store_rms_staged<T, kVec, kAccesses>(staged_x, ws, rstd, out + row * strides.out, hidden, live);
}

// Rows too wide to stage: one block per row, two passes; the second reads residual_out back. Each
// thread reads back only the elements it wrote (same columns in both loops).
template <typename T, int kVec>
__global__ void __launch_bounds__(kWideThreads)
    fused_add_rmsnorm_wide_kernel(const T* x, const T* residual, const T* __restrict__ weight, T* out,
                                  T* residual_out, int hidden, Strides strides, float eps) {
  __shared__ float scratch[kWideThreads / 32];
  const int64_t row = blockIdx.x;
  const T* x_row = x + row * strides.x;
  const T* r_row = residual + row * strides.residual;
  T* out_row = out + row * strides.out;
  T* r_out_row = residual_out + row * strides.residual_out;
  const int step = blockDim.x * kVec;
  float sum = 0.f;
  for (int col = threadIdx.x * kVec; col < hidden; col += step) {
    const Pack<T, kVec> px = load<T, kVec>(x_row + col);
    const Pack<T, kVec> pr = load<T, kVec>(r_row + col);
    Pack<T, kVec> s;
#pragma unroll
    for (int k = 0; k < kVec; ++k) {
      s.v[k] = from_float<T>(to_float(px.v[k]) + to_float(pr.v[k]));
      const float v = to_float(s.v[k]);
      sum += v * v;
    }
    store<T, kVec>(r_out_row + col, s);
  }
  const float rstd = rsqrtf(row_sum(sum, scratch) / static_cast<float>(hidden) + eps);
  store_rms_wide<T, kVec>(r_out_row, weight, rstd, out_row, hidden);
}

// The tensors of one call, already checked: [rows, hidden] with contiguous rows, one dtype.
template <typename T>
struct Args {
  const T* x;
  const T* residual;
  const T* weight;
  T* out;
  T* residual_out;
  int64_t rows;
  int hidden;
  Strides strides;
  float eps;
};

struct FusedAddRmsNorm {
  template <typename T, int kVec, int kAccesses>
  static void rows(const Plan& p, const Args<T>& a, cudaStream_t stream) {
    const size_t shared = static_cast<size_t>(p.rows_per_block) * 2 * a.hidden * sizeof(T);
    launch_staged(fused_add_rmsnorm_rows_kernel<T, kVec, kAccesses>, p, a.rows, shared, stream, a.x, a.residual,
                  a.weight, a.out, a.residual_out, a.rows, a.hidden, a.strides, a.eps);
  }
  template <typename T, int kVec>
  static void wide(const Args<T>& a, cudaStream_t stream) {
    fused_add_rmsnorm_wide_kernel<T, kVec><<<static_cast<unsigned>(a.rows), kWideThreads, 0, stream>>>(
        a.x, a.residual, a.weight, a.out, a.residual_out, a.hidden, a.strides, a.eps);
  }
};

template <typename T>
void launch(tvm::ffi::TensorView x, tvm::ffi::TensorView residual, tvm::ffi::TensorView weight,
            tvm::ffi::TensorView out, tvm::ffi::TensorView residual_out, float eps, cudaStream_t stream) {
  const Args<T> a{data_of<T>(x), data_of<T>(residual), data_of<T>(weight), data_of<T>(out), data_of<T>(residual_out),
                  x.size(0), static_cast<int>(x.size(1)),
                  Strides{x.stride(0), residual.stride(0), out.stride(0), residual_out.stride(0)}, eps};
  constexpr int kVec = 16 / sizeof(T);
  const Strides& s = a.strides;
  const bool strides_ok = a.rows == 1 || (s.x % kVec == 0 && s.residual % kVec == 0 && s.out % kVec == 0 &&
                                          s.residual_out % kVec == 0);
  const bool vectorized = aligned16(a.x) && aligned16(a.residual) && aligned16(a.weight) && aligned16(a.out) &&
                          aligned16(a.residual_out) && a.hidden % kVec == 0 && strides_ok;
  launch_norm<FusedAddRmsNorm, T>(a, vectorized, multiprocessors(x.device().device_id), stream);
}

void check_and_launch(tvm::ffi::TensorView x, tvm::ffi::TensorView residual, tvm::ffi::TensorView weight,
                      double eps, tvm::ffi::TensorView out, tvm::ffi::TensorView residual_out) {
  const tvm::ffi::TensorView rows_tensors[] = {x, residual, out, residual_out};
  for (const auto& t : rows_tensors) {
    TVM_FFI_ICHECK(t.ndim() == 2 && t.size(0) == x.size(0) && t.size(1) == x.size(1))
        << "fused_add_rmsnorm: x, residual, out and residual_out must be [rows, hidden] alike";
    TVM_FFI_ICHECK(t.dtype() == x.dtype()) << "fused_add_rmsnorm: every tensor must have the dtype of x";
    TVM_FFI_ICHECK(t.device().device_type == kDLCUDA) << "fused_add_rmsnorm: tensors must be on a CUDA device";
  }
  TVM_FFI_ICHECK(weight.ndim() == 1 && weight.size(0) == x.size(1) && weight.dtype() == x.dtype() &&
                 weight.device().device_type == kDLCUDA)
      << "fused_add_rmsnorm: weight must be [hidden] on the device, of the dtype of x";
  TVM_FFI_ICHECK(x.size(1) < (int64_t{1} << 30)) << "fused_add_rmsnorm: rows of 2^30 elements or more";
  TVM_FFI_ICHECK(x.size(0) < (int64_t{1} << 31)) << "fused_add_rmsnorm: 2^31 rows or more";
  if (x.size(0) == 0 || x.size(1) == 0) return;
  if (x.size(1) > 1) {
    for (const auto& t : rows_tensors) {
      TVM_FFI_ICHECK(t.stride(1) == 1) << "fused_add_rmsnorm: the last dimension must be contiguous";
    }
    TVM_FFI_ICHECK(weight.stride(0) == 1) << "fused_add_rmsnorm: weight must be contiguous";
  }
  auto stream = static_cast<cudaStream_t>(TVMFFIEnvGetStream(x.device().device_type, x.device().device_id));
  with_float_type(x.dtype(), "fused_add_rmsnorm", [&](auto type) {
    launch<decltype(type)>(x, residual, weight, out, residual_out, static_cast<float>(eps), stream);
  });
  check_launch("fused_add_rmsnorm");
}

}  // namespace

void run(tvm::ffi::TensorView x, tvm::ffi::TensorView residual, tvm::ffi::TensorView weight, double eps,
         tvm::ffi::TensorView out, tvm::ffi::TensorView residual_out) {
  check_and_launch(x, residual, weight, eps, out, residual_out);
}

void run_inplace(tvm::ffi::TensorView x, tvm::ffi::TensorView residual, tvm::ffi::TensorView weight, double eps) {
  check_and_launch(x, residual, weight, eps, x, residual);
}

TVM_FFI_DLL_EXPORT_TYPED_FUNC(run, run);
TVM_FFI_DLL_EXPORT_TYPED_FUNC(run_inplace, run_inplace);
