// Element conversion and vector accesses for the library's memory-bound CUDA kernels, and the
// host's view of a tvm-ffi tensor: one definition for every kernel that embeds it.
//
// A Pack<T, kVec> is kVec elements moved as one access: 16 bytes on the vector path (kVec =
// 16 / sizeof(T)), one element otherwise.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <tvm/ffi/container/tensor.h>
#include <tvm/ffi/error.h>

#include <cstdint>

namespace {

template <typename T>
__device__ __forceinline__ float to_float(T v) { return static_cast<float>(v); }
template <>
__device__ __forceinline__ float to_float(__half v) { return __half2float(v); }
template <>
__device__ __forceinline__ float to_float(__nv_bfloat16 v) { return __bfloat162float(v); }

// Rounded to nearest even.
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
__device__ __forceinline__ Pack<T, kVec> load(const T* p) {
  return *reinterpret_cast<const Pack<T, kVec>*>(p);
}

// For data no thread of the kernel writes (weight, bias): the read-only path, cached.
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

// For data read once: ld.global.cs (evict first).
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
__device__ __forceinline__ void store(T* p, const Pack<T, kVec>& value) {
  *reinterpret_cast<Pack<T, kVec>*>(p) = value;
}

// Global to shared: cp.async for 16 bytes (L2 only, .cg: the data is read once), else through a
// register. The copying thread is the only one that reads the data back, so cp_async_wait suffices.
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

// -- host --------------------------------------------------------------------------------------

template <typename T>
T* data_of(const tvm::ffi::TensorView& t) {
  return reinterpret_cast<T*>(static_cast<char*>(t.data_ptr()) + t.byte_offset());
}

inline bool aligned16(const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; }

// launch(T{}) with T the storage type of ``dtype`` (float32, float16, bfloat16); any other dtype
// throws, naming ``op``.
template <typename Launch>
void with_float_type(DLDataType dtype, const char* op, Launch&& launch) {
  if (dtype.code == kDLFloat && dtype.bits == 32) {
    launch(float{});
  } else if (dtype.code == kDLFloat && dtype.bits == 16) {
    launch(__half{});
  } else if (dtype.code == kDLBfloat && dtype.bits == 16) {
    launch(__nv_bfloat16{});
  } else {
    TVM_FFI_THROW(TypeError) << op << ": unsupported dtype (float32, float16 and bfloat16 only)";
  }
}

// After the launches of a call: a launch error fails the call, naming ``op``.
inline void check_launch(const char* op) {
  const cudaError_t status = cudaGetLastError();
  TVM_FFI_ICHECK(status == cudaSuccess) << op << ": launch failed: " << cudaGetErrorString(status);
}

}  // namespace
