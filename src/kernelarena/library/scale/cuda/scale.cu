// scale: out[r, c] = x[r, c] * factor, computed in float32.
// One block per (row, chunk of 8 * 256 elements); 16-byte loads when the row start is aligned.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <tvm/ffi/container/tensor.h>
#include <tvm/ffi/error.h>
#include <tvm/ffi/extra/c_env_api.h>
#include <tvm/ffi/function.h>

namespace {

constexpr int kThreads = 256;

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

template <typename T>
__global__ void scale_kernel(const T* __restrict__ x, T* __restrict__ out, float factor, int64_t cols,
                             int64_t x_stride, int64_t out_stride) {
  constexpr int kVec = 16 / sizeof(T);
  const int64_t row = blockIdx.y;
  const T* x_row = x + row * x_stride;
  T* out_row = out + row * out_stride;
  const int64_t chunk = static_cast<int64_t>(kThreads) * kVec;
  const int64_t start = static_cast<int64_t>(blockIdx.x) * chunk + threadIdx.x * kVec;
  const bool aligned = (reinterpret_cast<uintptr_t>(x_row) % 16 == 0) &&
                       (reinterpret_cast<uintptr_t>(out_row) % 16 == 0);
  if (aligned && start + kVec <= cols) {
    uint4 packed = __ldcs(reinterpret_cast<const uint4*>(x_row + start));
    T* values = reinterpret_cast<T*>(&packed);
#pragma unroll
    for (int i = 0; i < kVec; ++i) values[i] = from_float<T>(to_float(values[i]) * factor);
    __stcs(reinterpret_cast<uint4*>(out_row + start), packed);
  } else {
    for (int64_t i = start; i < start + kVec && i < cols; ++i) {
      out_row[i] = from_float<T>(to_float(x_row[i]) * factor);
    }
  }
}

template <typename T>
void launch(tvm::ffi::TensorView x, tvm::ffi::TensorView out, float factor, cudaStream_t stream) {
  const int64_t rows = x.size(0), cols = x.size(1);
  constexpr int kVec = 16 / sizeof(T);
  const int64_t chunk = static_cast<int64_t>(kThreads) * kVec;
  for (int64_t row0 = 0; row0 < rows; row0 += 65535) {  // gridDim.y is at most 65535
    const int64_t row_count = rows - row0 < 65535 ? rows - row0 : 65535;
    dim3 grid(static_cast<unsigned>((cols + chunk - 1) / chunk), static_cast<unsigned>(row_count));
    scale_kernel<T><<<grid, kThreads, 0, stream>>>(
        static_cast<const T*>(x.data_ptr()) + row0 * x.stride(0),
        static_cast<T*>(out.data_ptr()) + row0 * out.stride(0), factor, cols, x.stride(0), out.stride(0));
  }
}

}  // namespace

void run(tvm::ffi::TensorView x, double factor, tvm::ffi::TensorView out) {
  TVM_FFI_ICHECK_EQ(x.ndim(), 2) << "scale: x must be 2-D [rows, cols]";
  TVM_FFI_ICHECK(x.size(0) == out.size(0) && x.size(1) == out.size(1)) << "scale: out must have the shape of x";
  TVM_FFI_ICHECK(x.dtype() == out.dtype()) << "scale: out must have the dtype of x";
  TVM_FFI_ICHECK(x.stride(1) == 1 && out.stride(1) == 1) << "scale: the last dimension must be contiguous";
  if (x.size(0) == 0 || x.size(1) == 0) return;
  auto stream = static_cast<cudaStream_t>(TVMFFIEnvGetStream(x.device().device_type, x.device().device_id));
  const DLDataType dtype = x.dtype();
  if (dtype.code == kDLFloat && dtype.bits == 32) {
    launch<float>(x, out, static_cast<float>(factor), stream);
  } else if (dtype.code == kDLFloat && dtype.bits == 16) {
    launch<__half>(x, out, static_cast<float>(factor), stream);
  } else if (dtype.code == kDLBfloat && dtype.bits == 16) {
    launch<__nv_bfloat16>(x, out, static_cast<float>(factor), stream);
  } else {
    TVM_FFI_THROW(TypeError) << "scale: unsupported dtype";
  }
  cudaError_t status = cudaGetLastError();
  TVM_FFI_ICHECK(status == cudaSuccess) << "scale: launch failed: " << cudaGetErrorString(status);
}

TVM_FFI_DLL_EXPORT_TYPED_FUNC(run, run);
