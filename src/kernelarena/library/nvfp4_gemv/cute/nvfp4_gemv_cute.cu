// nvfp4_gemv with CuTe (CUTLASS 4 C++ headers, spec.dependencies ["cutlass"]): c[i, 0, l] =
// sum_k a[i, k, l] sfa[i, k/16, l] b[0, k, l] sfb[0, k/16, l], float32 sums rounded once to
// float16. Reads sfa/sfb (the plain scale layout). The kernel (nvfp4_gemv_cute.cuh) is the CUDA
// solution's whole-row variant 7 written over CuTe tensors; this file checks the inputs, splits the
// rows over the blocks and launches on the caller's stream.
#include <tvm/ffi/container/tensor.h>
#include <tvm/ffi/error.h>
#include <tvm/ffi/extra/c_env_api.h>
#include <tvm/ffi/function.h>

#include <algorithm>
#include <cstdint>

#include "nvfp4_gemv_cute.cuh"

namespace nvfp4_gemv_cute {
namespace {

constexpr int kMinBlocks = 2;          // blocks an SM (__launch_bounds__)
constexpr int64_t kMaxChunks = 2048;   // the decoded vector, 56 bytes a chunk, in shared memory
constexpr int64_t kGroupsCap = 128;    // groups a block at most when slices share rows

bool is_byte_type(DLDataType dtype, uint8_t code) {
  return (dtype.code == code || dtype.code == kDLUInt) && dtype.bits * dtype.lanes == 8;
}

const uint8_t* bytes_of(const tvm::ffi::TensorView& t) {
  return static_cast<const uint8_t*>(t.data_ptr()) + t.byte_offset();
}

int multiprocessors(int device) {
  int count = 0;
  cudaDeviceGetAttribute(&count, cudaDevAttrMultiProcessorCount, device);
  return std::max(count, 1);
}

// Blocks a batch (about kMinBlocks an SM busy), warps a row (k slices, a power of 2 <= 8, while a
// warp would otherwise get fewer than 2 groups of rows), chunks a slice (whole steps of 32).
void split(Params& p, int64_t l, int device) {
  const int64_t groups = (int64_t(p.m) + kRows - 1) / kRows, chunks = p.chunks;
  int64_t per_batch = std::clamp<int64_t>(int64_t(kMinBlocks) * multiprocessors(device) / l, 1, groups);
  const auto slice_chunks = [&](int64_t s) { return ((chunks + s - 1) / s + 31) / 32 * 32; };
  int64_t slices = 1;
  while (slices < kWarps && (groups / per_batch) * slices < 2 * kWarps &&
         (2 * slices - 1) * slice_chunks(2 * slices) < chunks) {
    slices *= 2;
  }
  if (slices > 1) per_batch = std::max(per_batch, (groups + kGroupsCap - 1) / kGroupsCap);
  p.slices = static_cast<int32_t>(slices);
  p.slice_chunks = static_cast<int32_t>(slice_chunks(slices));
  p.blocks_per_batch = static_cast<int32_t>(per_batch);
  p.rows_cap = static_cast<int32_t>((groups + per_batch - 1) / per_batch * kRows);
}

void run(tvm::ffi::TensorView a, tvm::ffi::TensorView b, tvm::ffi::TensorView sfa, tvm::ffi::TensorView sfb,
         tvm::ffi::TensorView c) {
  TVM_FFI_ICHECK(a.ndim() == 3 && b.ndim() == 3 && sfa.ndim() == 3 && sfb.ndim() == 3 && c.ndim() == 3)
      << "nvfp4_gemv (CuTe): a, b, sfa, sfb and c must be 3-D";
  for (const tvm::ffi::TensorView* t : {&b, &sfa, &sfb, &c}) {
    TVM_FFI_ICHECK(t->device().device_type == kDLCUDA && t->device().device_id == a.device().device_id)
        << "nvfp4_gemv (CuTe): every tensor must be on a's CUDA device";
  }
  const int64_t m = a.size(0), k_packed = a.size(1), l = a.size(2), k_scales = k_packed / 8;
  TVM_FFI_ICHECK(is_byte_type(a.dtype(), kDLFloat4_e2m1fn) && is_byte_type(b.dtype(), kDLFloat4_e2m1fn))
      << "nvfp4_gemv (CuTe): a and b must be float4_e2m1fnx2 (packed bytes)";
  TVM_FFI_ICHECK(is_byte_type(sfa.dtype(), kDLFloat8_e4m3fn) && is_byte_type(sfb.dtype(), kDLFloat8_e4m3fn))
      << "nvfp4_gemv (CuTe): sfa and sfb must be float8_e4m3fn";
  TVM_FFI_ICHECK(c.dtype().code == kDLFloat && c.dtype().bits == 16 && c.dtype().lanes == 1)
      << "nvfp4_gemv (CuTe): c must be float16";
  TVM_FFI_ICHECK(k_packed % 32 == 0 && k_packed > 0 && k_packed / 16 <= kMaxChunks)
      << "nvfp4_gemv (CuTe): k must be a multiple of 64, at most " << 32 * kMaxChunks;
  TVM_FFI_ICHECK(c.size(0) == m && c.size(1) == 1 && c.size(2) == l) << "nvfp4_gemv (CuTe): c must be [m, 1, l]";
  TVM_FFI_ICHECK(b.size(0) >= 1 && b.size(1) == k_packed && b.size(2) == l)
      << "nvfp4_gemv (CuTe): b must be [n, k/2, l]";
  TVM_FFI_ICHECK(sfa.size(0) == m && sfa.size(1) == k_scales && sfa.size(2) == l)
      << "nvfp4_gemv (CuTe): sfa must be [m, k/16, l]";
  TVM_FFI_ICHECK(sfb.size(0) >= 1 && sfb.size(1) == k_scales && sfb.size(2) == l)
      << "nvfp4_gemv (CuTe): sfb must be [n, k/16, l]";
  TVM_FFI_ICHECK(m < (int64_t(1) << 31)) << "nvfp4_gemv (CuTe): at most 2^31 - 1 rows";
  // 16-byte chunks of A and b, 2-byte scale pairs: contiguous along k, rows and batches aligned.
  for (const tvm::ffi::TensorView* t : {&a, &b}) {
    const int64_t parts = static_cast<int64_t>(reinterpret_cast<uintptr_t>(bytes_of(*t))) | t->stride(0) | t->stride(2);
    TVM_FFI_ICHECK(t->stride(1) == 1 && parts % 16 == 0)
        << "nvfp4_gemv (CuTe): a and b must be contiguous along k, rows and batches on 16 bytes";
  }
  for (const tvm::ffi::TensorView* t : {&sfa, &sfb}) {
    const int64_t parts = static_cast<int64_t>(reinterpret_cast<uintptr_t>(bytes_of(*t))) | t->stride(0) | t->stride(2);
    TVM_FFI_ICHECK(t->stride(1) == 1 && parts % 2 == 0)
        << "nvfp4_gemv (CuTe): scales must be contiguous along k, rows and batches on 2 bytes";
  }
  if (m == 0 || l == 0) return;

  Params p{};
  p.a = reinterpret_cast<const uint128_t*>(bytes_of(a));
  p.b = reinterpret_cast<const uint128_t*>(bytes_of(b));
  p.sfa = reinterpret_cast<const uint16_t*>(bytes_of(sfa));
  p.sfb = reinterpret_cast<const uint16_t*>(bytes_of(sfb));
  p.c = reinterpret_cast<__half*>(static_cast<uint8_t*>(c.data_ptr()) + c.byte_offset());
  p.m = static_cast<int32_t>(m);
  p.chunks = static_cast<int32_t>(k_packed / 16);
  p.a_row = a.stride(0) / 16;
  p.a_batch = a.stride(2) / 16;
  p.b_batch = b.stride(2) / 16;
  p.sfa_row = sfa.stride(0) / 2;
  p.sfa_batch = sfa.stride(2) / 2;
  p.sfb_batch = sfb.stride(2) / 2;
  p.c_row = c.stride(0);
  p.c_batch = c.stride(2);
  const int device = a.device().device_id;
  split(p, l, device);

  const size_t shared = shared_vector_bytes(uint32_t(p.slices) * p.slice_chunks, p.slices, p.rows_cap);
  TVM_FFI_ICHECK(cudaFuncSetAttribute(gemv_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                      static_cast<int>(shared)) == cudaSuccess)
      << "nvfp4_gemv (CuTe): " << shared << " bytes of shared memory refused";
  auto stream = static_cast<cudaStream_t>(TVMFFIEnvGetStream(a.device().device_type, device));
  const int64_t grid = int64_t(p.blocks_per_batch) * l;
  gemv_kernel<<<static_cast<unsigned>(grid), kThreads, shared, stream>>>(p);
  const cudaError_t status = cudaGetLastError();
  TVM_FFI_ICHECK(status == cudaSuccess) << "nvfp4_gemv (CuTe): launch failed: " << cudaGetErrorString(status);
}

}  // namespace
}  // namespace nvfp4_gemv_cute

void run(tvm::ffi::TensorView a, tvm::ffi::TensorView b, tvm::ffi::TensorView sfa, tvm::ffi::TensorView sfb,
         tvm::ffi::TensorView sfa_permuted, tvm::ffi::TensorView sfb_permuted, tvm::ffi::TensorView c) {
  nvfp4_gemv_cute::run(a, b, sfa, sfb, c);
}

TVM_FFI_DLL_EXPORT_TYPED_FUNC(run, run);
