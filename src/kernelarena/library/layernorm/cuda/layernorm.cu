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
//   into registers after the reductions, as before 2026-11-22, it cost every row an exposed L2 round
//   trip and 128 registers a thread (ptxas, bf16, 8192 wide), so 4 blocks per SM: 78% of the copy
//   bandwidth at 32768x8192 on an H200; now 94 registers and 32 KB of shared memory, 5 blocks per
//   SM.) weight and bias stay in L2 for every row.
// - Threads per row: the fewest (one warp at least) covering the row in 8 copies each; rows
//   narrower than 4 warps share a block of 128 threads; few rows (launch-bound) spread wider.
// - Row sums: warp shuffles, then one shared-memory step across the row's warps.
// - 16-byte accesses need x, out, weight and bias 16-byte aligned and the width and row strides
//   whole numbers of vectors (checked on the host); otherwise one element per access.
// - Stores keep the default cache policy: out is the next kernel's input.
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

constexpr int kVectorAccesses = 8;   // 16-byte accesses per thread, at most, for a staged row
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

template <typename T, int kVec, int kAccesses>
void launch_rows(const Plan& p, const Args<T>& a, cudaStream_t stream) {
  auto kernel = layernorm_rows_kernel<T, kVec, kAccesses>;
  // The block's rows, then bias.
  const size_t shared = static_cast<size_t>(p.rows_per_block + 1) * a.hidden * sizeof(T);
  // Past 48 KB of shared memory a block (static scratch included) must opt in (Hopper: 227 KB).
  if (shared + sizeof(float) * (kRowThreads / 32) > 48 * 1024) {
    cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(shared));
  }
  const dim3 grid(static_cast<unsigned>(ceil_div(a.rows, p.rows_per_block)));
  const dim3 block(p.threads, p.rows_per_block);
  kernel<<<grid, block, shared, stream>>>(a.x, a.weight, a.bias, a.out, a.rows, a.hidden, a.x_stride, a.out_stride,
                                          a.eps);
}

template <typename T, int kVec>
void launch_wide(const Args<T>& a, cudaStream_t stream) {
  layernorm_wide_kernel<T, kVec><<<static_cast<unsigned>(a.rows), kWideThreads, 0, stream>>>(
      a.x, a.weight, a.bias, a.out, a.hidden, a.x_stride, a.out_stride, a.eps);
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
void launch(tvm::ffi::TensorView x, tvm::ffi::TensorView weight, tvm::ffi::TensorView bias, tvm::ffi::TensorView out,
            float eps, cudaStream_t stream) {
  const Args<T> a{data_of<T>(x), data_of<T>(weight), data_of<T>(bias), data_of<T>(out), x.size(0),
                  static_cast<int>(x.size(1)), x.stride(0), out.stride(0), eps};
  constexpr int kVec = 16 / sizeof(T);
  const bool vectorized = aligned16(a.x) && aligned16(a.weight) && aligned16(a.bias) && aligned16(a.out) &&
                          a.hidden % kVec == 0 &&
                          (a.rows == 1 || (a.x_stride % kVec == 0 && a.out_stride % kVec == 0));
  const int sms = multiprocessors(x.device().device_id);
  if (vectorized) {
    launch_vectorized<T>(a, sms, stream);
  } else {
    launch_scalar<T>(a, sms, stream);
  }
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
  const DLDataType dtype = x.dtype();
  const float eps_f = static_cast<float>(eps);
  if (dtype.code == kDLFloat && dtype.bits == 32) {
    launch<float>(x, weight, bias, out, eps_f, stream);
  } else if (dtype.code == kDLFloat && dtype.bits == 16) {
    launch<__half>(x, weight, bias, out, eps_f, stream);
  } else if (dtype.code == kDLBfloat && dtype.bits == 16) {
    launch<__nv_bfloat16>(x, weight, bias, out, eps_f, stream);
  } else {
    TVM_FFI_THROW(TypeError) << "layernorm: unsupported dtype (float32, float16 and bfloat16 only)";
  }
  cudaError_t status = cudaGetLastError();
  TVM_FFI_ICHECK(status == cudaSuccess) << "layernorm: launch failed: " << cudaGetErrorString(status);
}

TVM_FFI_DLL_EXPORT_TYPED_FUNC(run, run);
