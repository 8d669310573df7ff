// scale in CUDA C++: out[r, c] = x[r, c] * factor, computed in float32 and rounded once.
//
// Memory-bound, so the kernel's job is to keep HBM busy:
// - 16-byte accesses (8 bf16/fp16 or 4 fp32 elements) when x, out, their row strides and the width
//   allow it (checked on the host), else one element per access.
// - Each thread loads kUnroll accesses before it computes: 32 bytes in flight per thread.
// - Loads stream (ld.global.cs, evict first): x is read once. Stores keep the default policy since
//   out is the next kernel's input and may stay in the 50-60 MB L2 when it fits.
// - A block of 256 threads is (threads across a row) x (rows); grid.x tiles the columns and grid.y
//   the rows, looping when rows exceed gridDim.y's limit of 65535. Offsets are 64-bit: a million
//   rows of 16K elements is 2^34 elements.
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

constexpr int kThreads = 256;
constexpr int kUnroll = 2;
constexpr int64_t kMaxGridY = 65535;

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
__device__ __forceinline__ Pack<T, kVec> load_streaming(const Pack<T, kVec>* p) {
  Pack<T, kVec> result;
  if constexpr (sizeof(Pack<T, kVec>) == 16) {
    *reinterpret_cast<uint4*>(&result) = __ldcs(reinterpret_cast<const uint4*>(p));
  } else {
    result = *p;
  }
  return result;
}

template <typename T, int kVec>
__global__ void __launch_bounds__(kThreads)
    scale_kernel(const T* __restrict__ x, T* __restrict__ out, float factor, int64_t rows,
                 int64_t cols, int64_t x_stride, int64_t out_stride) {
  using P = Pack<T, kVec>;
  const int64_t packs_per_row = cols / kVec;
  const int64_t first = static_cast<int64_t>(blockIdx.x) * blockDim.x * kUnroll + threadIdx.x;
  const int64_t row_step = static_cast<int64_t>(gridDim.y) * blockDim.y;
  for (int64_t row = static_cast<int64_t>(blockIdx.y) * blockDim.y + threadIdx.y; row < rows;
       row += row_step) {
    const P* src = reinterpret_cast<const P*>(x + row * x_stride);
    P* dst = reinterpret_cast<P*>(out + row * out_stride);
    P values[kUnroll];
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      const int64_t i = first + static_cast<int64_t>(u) * blockDim.x;
      if (i < packs_per_row) values[u] = load_streaming(src + i);
    }
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      const int64_t i = first + static_cast<int64_t>(u) * blockDim.x;
      if (i < packs_per_row) {
#pragma unroll
        for (int k = 0; k < kVec; ++k) {
          values[u].v[k] = from_float<T>(to_float(values[u].v[k]) * factor);
        }
        dst[i] = values[u];
      }
    }
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

struct Launch {
  dim3 grid;
  dim3 block;
};

// Threads across a row cover its packs kUnroll at a time; the rest of the block takes more rows.
// Shapes too small to give every SM two blocks get fewer rows per block, then narrower blocks.
Launch plan(int64_t rows, int64_t packs_per_row, int sms) {
  int64_t tx = 1;
  while (tx < kThreads && tx * kUnroll < packs_per_row) tx *= 2;
  int64_t ty = kThreads / tx;
  auto blocks = [&] { return ceil_div(packs_per_row, tx * kUnroll) * ceil_div(rows, ty); };
  while (ty > 1 && blocks() < 2 * sms) ty /= 2;
  while (tx > 32 && blocks() < 2 * sms) tx /= 2;
  const int64_t row_blocks = std::min(ceil_div(rows, ty), kMaxGridY);
  const int64_t col_blocks = ceil_div(packs_per_row, tx * kUnroll);
  return {dim3(static_cast<unsigned>(col_blocks), static_cast<unsigned>(row_blocks)),
          dim3(static_cast<unsigned>(tx), static_cast<unsigned>(ty))};
}

template <typename T, int kVec>
void launch_with(const T* x, T* out, float factor, int64_t rows, int64_t cols, int64_t x_stride,
                 int64_t out_stride, int device, cudaStream_t stream) {
  const Launch l = plan(rows, cols / kVec, multiprocessors(device));
  scale_kernel<T, kVec>
      <<<l.grid, l.block, 0, stream>>>(x, out, factor, rows, cols, x_stride, out_stride);
}

template <typename T>
void launch(tvm::ffi::TensorView x, tvm::ffi::TensorView out, float factor, cudaStream_t stream) {
  const T* x_ptr =
      reinterpret_cast<const T*>(static_cast<const char*>(x.data_ptr()) + x.byte_offset());
  T* out_ptr = reinterpret_cast<T*>(static_cast<char*>(out.data_ptr()) + out.byte_offset());
  const int64_t rows = x.size(0), cols = x.size(1);
  const int64_t x_stride = x.stride(0), out_stride = out.stride(0);
  constexpr int kVec = 16 / sizeof(T);
  const bool vectorized = reinterpret_cast<uintptr_t>(x_ptr) % 16 == 0 &&
                          reinterpret_cast<uintptr_t>(out_ptr) % 16 == 0 && cols % kVec == 0 &&
                          (rows == 1 || (x_stride % kVec == 0 && out_stride % kVec == 0));
  const int device = x.device().device_id;
  if (vectorized) {
    launch_with<T, kVec>(x_ptr, out_ptr, factor, rows, cols, x_stride, out_stride, device, stream);
  } else {
    launch_with<T, 1>(x_ptr, out_ptr, factor, rows, cols, x_stride, out_stride, device, stream);
  }
}

}  // namespace

void run(tvm::ffi::TensorView x, double factor, tvm::ffi::TensorView out) {
  TVM_FFI_ICHECK(x.ndim() == 2 && out.ndim() == 2) << "scale: x and out must be 2-D [rows, cols]";
  TVM_FFI_ICHECK(x.size(0) == out.size(0) && x.size(1) == out.size(1))
      << "scale: out must have the shape of x";
  TVM_FFI_ICHECK(x.dtype() == out.dtype()) << "scale: out must have the dtype of x";
  TVM_FFI_ICHECK(x.device().device_type == kDLCUDA && out.device().device_type == kDLCUDA)
      << "scale: x and out must be on a CUDA device";
  if (x.size(0) == 0 || x.size(1) == 0) return;
  TVM_FFI_ICHECK(x.stride(1) == 1 && out.stride(1) == 1)
      << "scale: the last dimension must be contiguous";
  auto stream = static_cast<cudaStream_t>(
      TVMFFIEnvGetStream(x.device().device_type, x.device().device_id));
  const DLDataType dtype = x.dtype();
  if (dtype.code == kDLFloat && dtype.bits == 32) {
    launch<float>(x, out, static_cast<float>(factor), stream);
  } else if (dtype.code == kDLFloat && dtype.bits == 16) {
    launch<__half>(x, out, static_cast<float>(factor), stream);
  } else if (dtype.code == kDLBfloat && dtype.bits == 16) {
    launch<__nv_bfloat16>(x, out, static_cast<float>(factor), stream);
  } else {
    TVM_FFI_THROW(TypeError) << "scale: unsupported dtype (float32, float16 and bfloat16 only)";
  }
  cudaError_t status = cudaGetLastError();
  TVM_FFI_ICHECK(status == cudaSuccess) << "scale: launch failed: " << cudaGetErrorString(status);
}

TVM_FFI_DLL_EXPORT_TYPED_FUNC(run, run);
