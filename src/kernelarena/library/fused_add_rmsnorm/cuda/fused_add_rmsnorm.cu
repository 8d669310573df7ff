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
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <tvm/ffi/container/tensor.h>
#include <tvm/ffi/error.h>
#include <tvm/ffi/extra/c_env_api.h>
#include <tvm/ffi/function.h>

#include <algorithm>
#include <cstdint>

namespace {

constexpr int kVectorAccesses = 8;   // 16-byte accesses per thread, at most, for staged rows
constexpr int kScalarAccesses = 16;  // one-element accesses per thread, at most
constexpr int kRowThreads = 512;     // threads per row, at most, for a staged row
constexpr int kWideThreads = 1024;
constexpr int kBlockThreads = 128;   // at least this many threads per block (rows share a block)

template <typename T>
__device__ __forceinline__ float to_float(T v) { return static_cast<float>(v); }
template <>
__device__ __forceinline__ float to_float(__half v) { return __half2float(v); }
template <>
__device__ __forceinline__ float to_float(__nv_bfloat16 v) { return __bfloat162float(v); }

template <typename T>
__device__ __forceinline__ T from_float(float v) { return static_cast<T>(v); }
template <>
__device__ __forceinline__ __half from_float(float v) { return __float2half_rn(v); }
template <>
__device__ __forceinline__ __nv_bfloat16 from_float(float v) { return __float2bfloat16_rn(v); }

// kVec elements moved as one access: 16 bytes on the vector path, one element otherwise.
template <typename T, int kVec>
struct alignas(sizeof(T) * kVec) Pack {
  T v[kVec];
};

template <typename T, int kVec>
__device__ __forceinline__ Pack<T, kVec> load(const T* p) {
  return *reinterpret_cast<const Pack<T, kVec>*>(p);
}

// For data no thread of the kernel writes (weight): the read-only path, cached.
template <typename T, int kVec>
__device__ __forceinline__ Pack<T, kVec> load_read_only(const T* p) {
  Pack<T, kVec> result;
  if constexpr (sizeof(Pack<T, kVec>) == 16) {
    *reinterpret_cast<uint4*>(&result) = __ldg(reinterpret_cast<const uint4*>(p));
  } else {
    result = *reinterpret_cast<const Pack<T, kVec>*>(p);
  }
  return result;
}

template <typename T, int kVec>
__device__ __forceinline__ void store(T* p, const Pack<T, kVec>& value) {
  *reinterpret_cast<Pack<T, kVec>*>(p) = value;
}

// Global to shared: cp.async for 16 bytes (L2 only, .cg: x is read once), else through a register.
// The copying thread is the only one that reads the data back, so cp_async_wait suffices.
template <typename T, int kVec>
__device__ __forceinline__ void copy_to_shared(T* shared, const T* global) {
  if constexpr (sizeof(Pack<T, kVec>) == 16) {
    const unsigned address = static_cast<unsigned>(__cvta_generic_to_shared(shared));
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(address), "l"(global));
  } else {
    store<T, kVec>(shared, load<T, kVec>(global));
  }
}

__device__ __forceinline__ void cp_async_wait() {
  asm volatile("cp.async.commit_group;\ncp.async.wait_group 0;\n" ::: "memory");
}

__device__ __forceinline__ float warp_sum(float v) {
#pragma unroll
  for (int offset = 16; offset > 0; offset >>= 1) v += __shfl_xor_sync(0xffffffffu, v, offset);
  return v;
}

// Sum of v over the blockDim.x threads of this row (a multiple of 32); every thread gets it.
// All threads of the block must call it (it may synchronize the block).
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
  T* out_row = out + row * strides.out;
#pragma unroll
  for (int a = 0; a < kAccesses; ++a) {
    const int col = (a * blockDim.x + threadIdx.x) * kVec;
    if (live && col < hidden) {
      const Pack<T, kVec> s = load<T, kVec>(staged_x + col);
      Pack<T, kVec> y;
#pragma unroll
      for (int k = 0; k < kVec; ++k) y.v[k] = from_float<T>(to_float(s.v[k]) * rstd * to_float(ws[a].v[k]));
      store<T, kVec>(out_row + col, y);
    }
  }
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
  for (int col = threadIdx.x * kVec; col < hidden; col += step) {
    const Pack<T, kVec> s = load<T, kVec>(r_out_row + col);
    const Pack<T, kVec> w = load_read_only<T, kVec>(weight + col);
    Pack<T, kVec> y;
#pragma unroll
    for (int k = 0; k < kVec; ++k) y.v[k] = from_float<T>(to_float(s.v[k]) * rstd * to_float(w.v[k]));
    store<T, kVec>(out_row + col, y);
  }
}

int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

int multiprocessors(int device) {
  static int cached[64] = {};
  if (device < 0 || device >= 64) return 132;
  if (cached[device] == 0) {
    int count = 0;
    cudaDeviceGetAttribute(&count, cudaDevAttrMultiProcessorCount, device);
    cached[device] = count > 0 ? count : 132;
  }
  return cached[device];
}

struct Plan {
  int threads;  // per row; 0: the row is too wide to stage (wide kernel)
  int rows_per_block;
  int accesses;  // per thread
};

Plan plan(int64_t rows, int64_t packs_per_row, int max_accesses, int sms) {
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

template <typename T, int kVec, int kAccesses>
void launch_rows(const Plan& p, const Args<T>& a, cudaStream_t stream) {
  auto kernel = fused_add_rmsnorm_rows_kernel<T, kVec, kAccesses>;
  const size_t shared = static_cast<size_t>(p.rows_per_block) * 2 * a.hidden * sizeof(T);
  // Past 48 KB of shared memory a block (static scratch included) must opt in (Hopper: 227 KB).
  if (shared + sizeof(float) * (kRowThreads / 32) > 48 * 1024) {
    cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(shared));
  }
  const dim3 grid(static_cast<unsigned>(ceil_div(a.rows, p.rows_per_block)));
  const dim3 block(p.threads, p.rows_per_block);
  kernel<<<grid, block, shared, stream>>>(a.x, a.residual, a.weight, a.out, a.residual_out, a.rows, a.hidden,
                                          a.strides, a.eps);
}

template <typename T, int kVec>
void launch_wide(const Args<T>& a, cudaStream_t stream) {
  fused_add_rmsnorm_wide_kernel<T, kVec><<<static_cast<unsigned>(a.rows), kWideThreads, 0, stream>>>(
      a.x, a.residual, a.weight, a.out, a.residual_out, a.hidden, a.strides, a.eps);
}

// 16-byte accesses: tiers of 1, 2, 4 and 8 accesses a thread, so narrow rows hold few registers.
template <typename T>
void launch_vectorized(const Args<T>& a, int sms, cudaStream_t stream) {
  constexpr int kVec = 16 / sizeof(T);
  const Plan p = plan(a.rows, a.hidden / kVec, kVectorAccesses, sms);
  if (p.threads == 0) return launch_wide<T, kVec>(a, stream);
  if (p.accesses == 1) return launch_rows<T, kVec, 1>(p, a, stream);
  if (p.accesses == 2) return launch_rows<T, kVec, 2>(p, a, stream);
  if (p.accesses == 4) return launch_rows<T, kVec, 4>(p, a, stream);
  launch_rows<T, kVec, kVectorAccesses>(p, a, stream);
}

// One element per access (unaligned data, or a width not a whole number of vectors): one tier.
template <typename T>
void launch_scalar(const Args<T>& a, int sms, cudaStream_t stream) {
  const Plan p = plan(a.rows, a.hidden, kScalarAccesses, sms);
  if (p.threads == 0) return launch_wide<T, 1>(a, stream);
  launch_rows<T, 1, kScalarAccesses>(p, a, stream);
}

template <typename T>
T* data_of(const tvm::ffi::TensorView& t) {
  return reinterpret_cast<T*>(static_cast<char*>(t.data_ptr()) + t.byte_offset());
}

bool aligned16(const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; }

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
  const int sms = multiprocessors(x.device().device_id);
  if (vectorized) {
    launch_vectorized<T>(a, sms, stream);
  } else {
    launch_scalar<T>(a, sms, stream);
  }
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
  const DLDataType dtype = x.dtype();
  const float eps_f = static_cast<float>(eps);
  if (dtype.code == kDLFloat && dtype.bits == 32) {
    launch<float>(x, residual, weight, out, residual_out, eps_f, stream);
  } else if (dtype.code == kDLFloat && dtype.bits == 16) {
    launch<__half>(x, residual, weight, out, residual_out, eps_f, stream);
  } else if (dtype.code == kDLBfloat && dtype.bits == 16) {
    launch<__nv_bfloat16>(x, residual, weight, out, residual_out, eps_f, stream);
  } else {
    TVM_FFI_THROW(TypeError) << "fused_add_rmsnorm: unsupported dtype (float32, float16 and bfloat16 only)";
  }
  cudaError_t status = cudaGetLastError();
  TVM_FFI_ICHECK(status == cudaSuccess) << "fused_add_rmsnorm: launch failed: " << cudaGetErrorString(status);
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
