// gelu_and_mul and gelu_tanh_and_mul in CUDA C++: out[r, :] = gelu(x[r, :d]) * x[r, d:], in
// float32, rounded once. FlashInfer's names: ``run`` is the exact GELU, ``run_tanh`` its tanh
// approximation.
//
// The layout of silu_and_mul's kernel (library/silu_and_mul/cuda/silu_and_mul.cu), with the
// activation as a template parameter:
// - 16-byte accesses when x, out, d and the row strides allow it (checked on the host), else one
//   element per access; kUnroll gate and up vectors loaded per thread before computing.
// - Streaming loads (ld.global.cs): x is read once; plain stores: out may stay in L2 for the next
//   GEMM.
// - Blocks of 256 threads as (threads across a row) x (rows); grid.y loops past 65535 rows; 64-bit
//   offsets.
// - tanh GELU: 0.5 g (1 + tanh(z)) = g * sigmoid(2 z) = g / (1 + e^(-2 z)), z = sqrt(2/pi) (g +
//   0.044715 g^3): one __expf and one __fdividef, as SiLU, about 3e-6 relative error
//   (tanh.approx.f32 would be 2^-11, too coarse for fp16 and fp32). Where e^(-2 z) overflows (g
//   below about -10) the quotient is g * rcp(inf) = -0, the limit; above +10 it is g / 1.
// - exact GELU: g Phi(g), Phi the normal CDF from erfc without branches (normal_cdf below, the
//   Triton solution's formula and fit: Phi within 2.3e-7 absolute, 1.2e-6 relative for g > -3).
//   erff's two polynomial branches diverge within a warp, and with bf16 data the erff kernel was
//   limited by issue, not memory: 87% of the copy bandwidth at 32768x8192 on an H200.
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

struct GeluTanh {
  static constexpr const char* kName = "gelu_tanh_and_mul";
  static __device__ __forceinline__ float apply(float g) {
    constexpr float kLinear = 1.5957691216057308f;   // 2 sqrt(2/pi)
    constexpr float kCubic = 0.071354816272785f;     // 2 sqrt(2/pi) 0.044715
    const float two_z = g * fmaf(kCubic, g * g, kLinear);
    return __fdividef(g, 1.0f + __expf(-two_z));
  }
};

// Phi(g) = erfc(-g / sqrt 2) / 2: for z = |g| / sqrt 2, erfc(z) = t 2^(P(t) - z^2 log2 e) with
// t = 1 / (1 + z / 2) and P of degree 9 (relative error of erfc under 1.1e-7 in exact arithmetic);
// Phi = erfc / 2 for g < 0 and 1 - erfc / 2 otherwise. One division, one exp2, ten FMAs.
__device__ __forceinline__ float normal_cdf(float g) {
  const float z = fabsf(g) * 0.70710678118654752f;
  const float t = __fdividef(1.0f, fmaf(0.5f, z, 1.0f));  // 0 for z = inf: erfc 0, the limit
  float p = fmaf(0.24346851f, t, -1.1733749f);
  p = fmaf(p, t, 2.1254525f);
  p = fmaf(p, t, -1.6174033f);
  p = fmaf(p, t, 0.39147764f);
  p = fmaf(p, t, -0.26540717f);
  p = fmaf(p, t, 0.13905863f);
  p = fmaf(p, t, 0.5397484f);
  p = fmaf(p, t, 1.4427277f);
  p = fmaf(p, t, -1.8257482f);
  const float half_erfc = 0.5f * t * exp2f(fmaf(-z * z, 1.4426950408889634f, p));
  return g < 0.0f ? half_erfc : 1.0f - half_erfc;
}

struct GeluErf {
  static constexpr const char* kName = "gelu_and_mul";
  static __device__ __forceinline__ float apply(float g) { return g * normal_cdf(g); }
};

template <typename Gelu, typename T, int kVec>
__global__ void __launch_bounds__(kThreads)
    gelu_and_mul_kernel(const T* __restrict__ x, T* __restrict__ out, int64_t rows, int64_t d,
                        int64_t x_stride, int64_t out_stride) {
  using P = Pack<T, kVec>;
  const int64_t packs_per_row = d / kVec;
  const int64_t first = static_cast<int64_t>(blockIdx.x) * blockDim.x * kUnroll + threadIdx.x;
  const int64_t row_step = static_cast<int64_t>(gridDim.y) * blockDim.y;
  for (int64_t row = static_cast<int64_t>(blockIdx.y) * blockDim.y + threadIdx.y; row < rows;
       row += row_step) {
    const T* gate_row = x + row * x_stride;
    const P* gate = reinterpret_cast<const P*>(gate_row);
    const P* up = reinterpret_cast<const P*>(gate_row + d);
    P* dst = reinterpret_cast<P*>(out + row * out_stride);
    P g[kUnroll], u[kUnroll];
#pragma unroll
    for (int k = 0; k < kUnroll; ++k) {
      const int64_t i = first + static_cast<int64_t>(k) * blockDim.x;
      if (i < packs_per_row) {
        g[k] = load_streaming(gate + i);
        u[k] = load_streaming(up + i);
      }
    }
#pragma unroll
    for (int k = 0; k < kUnroll; ++k) {
      const int64_t i = first + static_cast<int64_t>(k) * blockDim.x;
      if (i < packs_per_row) {
        P result;
#pragma unroll
        for (int e = 0; e < kVec; ++e) {
          result.v[e] = from_float<T>(Gelu::apply(to_float(g[k].v[e])) * to_float(u[k].v[e]));
        }
        dst[i] = result;
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

template <typename Gelu, typename T, int kVec>
void launch_with(const T* x, T* out, int64_t rows, int64_t d, int64_t x_stride, int64_t out_stride,
                 int device, cudaStream_t stream) {
  const Launch l = plan(rows, d / kVec, multiprocessors(device));
  gelu_and_mul_kernel<Gelu, T, kVec>
      <<<l.grid, l.block, 0, stream>>>(x, out, rows, d, x_stride, out_stride);
}

template <typename Gelu, typename T>
void launch(tvm::ffi::TensorView x, tvm::ffi::TensorView out, cudaStream_t stream) {
  const T* x_ptr =
      reinterpret_cast<const T*>(static_cast<const char*>(x.data_ptr()) + x.byte_offset());
  T* out_ptr = reinterpret_cast<T*>(static_cast<char*>(out.data_ptr()) + out.byte_offset());
  const int64_t rows = out.size(0), d = out.size(1);
  const int64_t x_stride = x.stride(0), out_stride = out.stride(0);
  constexpr int kVec = 16 / sizeof(T);
  // d % kVec keeps the up half (d elements after the gate) 16-byte aligned too.
  const bool vectorized = reinterpret_cast<uintptr_t>(x_ptr) % 16 == 0 &&
                          reinterpret_cast<uintptr_t>(out_ptr) % 16 == 0 && d % kVec == 0 &&
                          (rows == 1 || (x_stride % kVec == 0 && out_stride % kVec == 0));
  const int device = x.device().device_id;
  if (vectorized) {
    launch_with<Gelu, T, kVec>(x_ptr, out_ptr, rows, d, x_stride, out_stride, device, stream);
  } else {
    launch_with<Gelu, T, 1>(x_ptr, out_ptr, rows, d, x_stride, out_stride, device, stream);
  }
}

template <typename Gelu>
void gelu_and_mul(tvm::ffi::TensorView x, tvm::ffi::TensorView out) {
  const char* name = Gelu::kName;
  TVM_FFI_ICHECK(x.ndim() == 2 && out.ndim() == 2) << name << ": x and out must be 2-D";
  TVM_FFI_ICHECK(x.size(0) == out.size(0) && x.size(1) == 2 * out.size(1))
      << name << ": x must be [rows, 2 d] and out [rows, d]";
  TVM_FFI_ICHECK(x.dtype() == out.dtype()) << name << ": out must have the dtype of x";
  TVM_FFI_ICHECK(x.device().device_type == kDLCUDA && out.device().device_type == kDLCUDA)
      << name << ": x and out must be on a CUDA device";
  if (out.size(0) == 0 || out.size(1) == 0) return;
  TVM_FFI_ICHECK(x.stride(1) == 1 && out.stride(1) == 1)
      << name << ": the last dimension must be contiguous";
  auto stream = static_cast<cudaStream_t>(
      TVMFFIEnvGetStream(x.device().device_type, x.device().device_id));
  const DLDataType dtype = x.dtype();
  if (dtype.code == kDLFloat && dtype.bits == 32) {
    launch<Gelu, float>(x, out, stream);
  } else if (dtype.code == kDLFloat && dtype.bits == 16) {
    launch<Gelu, __half>(x, out, stream);
  } else if (dtype.code == kDLBfloat && dtype.bits == 16) {
    launch<Gelu, __nv_bfloat16>(x, out, stream);
  } else {
    TVM_FFI_THROW(TypeError) << name << ": unsupported dtype (float32, float16 and bfloat16 only)";
  }
  cudaError_t status = cudaGetLastError();
  TVM_FFI_ICHECK(status == cudaSuccess)
      << name << ": launch failed: " << cudaGetErrorString(status);
}

}  // namespace

void run(tvm::ffi::TensorView x, tvm::ffi::TensorView out) { gelu_and_mul<GeluErf>(x, out); }

void run_tanh(tvm::ffi::TensorView x, tvm::ffi::TensorView out) { gelu_and_mul<GeluTanh>(x, out); }

TVM_FFI_DLL_EXPORT_TYPED_FUNC(run, run);
TVM_FFI_DLL_EXPORT_TYPED_FUNC(run_tanh, run_tanh);
