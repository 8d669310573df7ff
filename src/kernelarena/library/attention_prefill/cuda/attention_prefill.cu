// attention_prefill in CUDA C++ for Hopper: o = softmax(q k^T * sm_scale [+ causal mask]) v and
// the natural-log lse, GQA, bf16 and fp16, head_dim 64 and 128, any strides with the last
// dimension contiguous.
//
// The work is two matrix products per (query tile, key tile), 4 * b * h * s_q * s_kv * d flops,
// against (q + k + v + o) bytes read or written once: at b4 h32 s4096 d128, 1.1 PFLOP against
// 0.5 GB, so the tensor cores set the pace (~2 ms at 550 TFLOP/s against ~0.1 ms of memory).
// The kernel (attention_prefill_sm90.cuh) follows FlashAttention-3: TMA, mbarriers, a producer
// warpgroup and two consumer warpgroups running wgmma, the softmax between them in registers.
//
// On an H100 it runs at 0.91-0.98x cuDNN SDPA's TFLOP/s at head_dim 128 and ~0.9x at 64: the
// measurements, and those behind the compile-time switches below, are in
// docs/kernels/attention_prefill_cuda.md.
//
// Everything TMA can describe goes there: 16-byte aligned bases, strides that are multiples of
// 16 bytes, sm_scale > 0. The rest, and seq_kv = 0, takes the portable kernel
// (attention_prefill_simple.cuh), which is right for any valid input and much slower.
#include <cuda.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <tvm/ffi/container/tensor.h>
#include <tvm/ffi/error.h>
#include <tvm/ffi/extra/c_env_api.h>
#include <tvm/ffi/function.h>

#include <cmath>
#include <algorithm>
#include <cstdint>
#include <mutex>

#include "attention_prefill_simple.cuh"
#include "attention_prefill_sm90.cuh"

// K/V stages for head_dim 128: 2 take 160 KB of shared memory, 3 take 224 KB (the most that fits).
#ifndef ATTENTION_PREFILL_D128_STAGES
#define ATTENTION_PREFILL_D128_STAGES 2
#endif

// A persistent grid (a CTA an SM, each taking every gridDim-th work tile) instead of a CTA a
// tile. Off: its static round-robin balances causal work worse than the hardware's block
// scheduler (5% slower on causal shapes, within the spread of runs on full ones).
#ifndef ATTENTION_PREFILL_PERSISTENT
#define ATTENTION_PREFILL_PERSISTENT 0
#endif

namespace {

using tvm::ffi::TensorView;

// cuTensorMapEncodeTiled through the runtime's driver entry point, so nothing links libcuda.
using EncodeTiled = CUresult (*)(CUtensorMap*, CUtensorMapDataType, cuuint32_t, void*,
                                 const cuuint64_t*, const cuuint64_t*, const cuuint32_t*,
                                 const cuuint32_t*, CUtensorMapInterleave, CUtensorMapSwizzle,
                                 CUtensorMapL2promotion, CUtensorMapFloatOOBfill);

EncodeTiled encode_tiled() {
  static EncodeTiled fn = nullptr;
  static std::once_flag once;
  std::call_once(once, [] {
    void* found = nullptr;
    cudaDriverEntryPointQueryResult status;
    if (cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &found, 12000,
                                         cudaEnableDefault, &status) == cudaSuccess &&
        status == cudaDriverEntryPointSuccess) {
      fn = reinterpret_cast<EncodeTiled>(found);
    }
  });
  return fn;
}

int multiprocessors(int device) {
  static int count[64] = {};
  if (device < 0 || device >= 64) return 132;
  if (count[device] == 0) {
    int found = 0;
    cudaDeviceGetAttribute(&found, cudaDevAttrMultiProcessorCount, device);
    count[device] = found > 0 ? found : 132;
  }
  return count[device];
}

template <typename T>
T* data(const TensorView& t) {
  return reinterpret_cast<T*>(static_cast<char*>(t.data_ptr()) + t.byte_offset());
}

// A [batch, heads, seq, head_dim] tensor as a 4-D tensor map, boxes of 64 columns x 128 rows with
// the 128-byte swizzle. False where TMA cannot describe it (the caller takes the portable path).
bool make_map(CUtensorMap* map, const TensorView& t, bool bf16) {
  EncodeTiled encode = encode_tiled();
  if (encode == nullptr) return false;
  const uint64_t address = reinterpret_cast<uint64_t>(data<char>(t));
  if (address % 16 != 0) return false;
  cuuint64_t dims[4] = {static_cast<cuuint64_t>(t.size(3)), static_cast<cuuint64_t>(t.size(2)),
                        static_cast<cuuint64_t>(t.size(1)), static_cast<cuuint64_t>(t.size(0))};
  cuuint64_t strides[3];
  uint64_t dense = dims[0] * 2;
  for (int i = 0; i < 3; ++i) {
    // The stride of a dimension of size 1 is never used; any valid value will do.
    const int axis = 2 - i;
    uint64_t stride = t.size(axis) == 1 ? dense : static_cast<uint64_t>(t.stride(axis)) * 2;
    if (t.stride(axis) < 0 || stride % 16 != 0 || stride >= (uint64_t{1} << 40) || stride == 0) {
      return false;
    }
    strides[i] = stride;
    dense = stride * dims[i + 1];
  }
  for (int i = 0; i < 4; ++i) {
    if (dims[i] == 0 || dims[i] > (uint64_t{1} << 32)) return false;
  }
  cuuint32_t box[4] = {64, attention_prefill_sm90::kBlockN, 1, 1};
  cuuint32_t element_strides[4] = {1, 1, 1, 1};
  const CUresult result = encode(
      map, bf16 ? CU_TENSOR_MAP_DATA_TYPE_BFLOAT16 : CU_TENSOR_MAP_DATA_TYPE_FLOAT16, 4,
      reinterpret_cast<void*>(address), dims, strides, box, element_strides,
      CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_128B, CU_TENSOR_MAP_L2_PROMOTION_L2_256B,
      CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
  return result == CUDA_SUCCESS;
}

template <typename T, int kHeadDim, int kStages>
bool launch_sm90(const TensorView& q, const TensorView& k, const TensorView& v, float sm_scale,
                 bool causal, const TensorView& o, const TensorView& lse, cudaStream_t stream) {
  namespace k90 = attention_prefill_sm90;
  const int64_t batch = q.size(0), q_heads = q.size(1), seq_q = q.size(2), seq_kv = k.size(2);
  if (!(sm_scale > 0.0f) || !std::isfinite(sm_scale)) return false;
  const int64_t num_m_blocks = (seq_q + k90::kBlockM - 1) / k90::kBlockM;
  if (num_m_blocks * q_heads * batch >= (int64_t{1} << 31) || seq_q >= (int64_t{1} << 30) ||
      seq_kv >= (int64_t{1} << 30)) {
    return false;
  }
  // The epilogue stores pairs of columns as 32-bit words.
  if (reinterpret_cast<uint64_t>(data<T>(o)) % 4 != 0 || o.stride(0) % 2 != 0 ||
      o.stride(1) % 2 != 0 || o.stride(2) % 2 != 0) {
    return false;
  }
  const bool bf16 = std::is_same_v<T, __nv_bfloat16>;
  CUtensorMap map_q, map_k, map_v;
  if (!make_map(&map_q, q, bf16) || !make_map(&map_k, k, bf16) || !make_map(&map_v, v, bf16)) {
    return false;
  }
  k90::Params p{};
  p.o = data<T>(o);
  p.lse = data<float>(lse);
  p.o_stride_b = o.stride(0);
  p.o_stride_h = o.stride(1);
  p.o_stride_s = o.stride(2);
  p.lse_stride_b = lse.stride(0);
  p.lse_stride_h = lse.stride(1);
  p.lse_stride_s = lse.stride(2);
  p.seq_q = static_cast<int>(seq_q);
  p.seq_kv = static_cast<int>(seq_kv);
  p.group = static_cast<int>(q_heads / k.size(1));
  p.q_heads = static_cast<int>(q_heads);
  p.num_m_blocks = static_cast<int>(num_m_blocks);
  p.num_work = static_cast<int>(num_m_blocks * q_heads * batch);
  p.causal_offset = static_cast<int>(seq_kv - seq_q);
  p.causal = causal;
  p.scale_log2 = sm_scale * 1.4426950408889634f;

  auto kernel = k90::attention_kernel<T, kHeadDim, kStages>;
  constexpr int kSmem = k90::Layout<kHeadDim, kStages>::kDynamicBytes;
  static std::once_flag once;
  std::call_once(once, [&] {
    cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, kSmem);
  });
  int grid = p.num_work;
  if (ATTENTION_PREFILL_PERSISTENT) grid = std::min(grid, multiprocessors(q.device().device_id));
  kernel<<<grid, k90::kThreads, kSmem, stream>>>(map_q, map_k, map_v, p);
  return true;
}

template <typename T>
void launch_simple(const TensorView& q, const TensorView& k, const TensorView& v, float sm_scale,
                   bool causal, const TensorView& o, const TensorView& lse, cudaStream_t stream) {
  namespace ks = attention_prefill_simple;
  ks::Params p{};
  p.q = data<T>(q);
  p.k = data<T>(k);
  p.v = data<T>(v);
  p.o = data<T>(o);
  p.lse = data<float>(lse);
  for (int i = 0; i < 3; ++i) {
    p.q_stride[i] = q.stride(i);
    p.k_stride[i] = k.stride(i);
    p.v_stride[i] = v.stride(i);
    p.o_stride[i] = o.stride(i);
    p.lse_stride[i] = lse.stride(i);
  }
  p.q_heads = static_cast<int>(q.size(1));
  p.seq_q = static_cast<int>(q.size(2));
  p.seq_kv = static_cast<int>(k.size(2));
  p.head_dim = static_cast<int>(q.size(3));
  p.group = static_cast<int>(q.size(1) / k.size(1));
  p.total_rows = q.size(0) * q.size(1) * q.size(2);
  p.causal_offset = static_cast<int>(k.size(2) - q.size(2));
  p.causal = causal;
  p.sm_scale = sm_scale;
  const int64_t blocks = (p.total_rows + 3) / 4;  // 4 rows (warps) a block of 128 threads
  if (p.head_dim <= 64) {
    ks::attention_simple_kernel<2, T><<<static_cast<unsigned>(blocks), 128, 0, stream>>>(p);
  } else if (p.head_dim <= 128) {
    ks::attention_simple_kernel<4, T><<<static_cast<unsigned>(blocks), 128, 0, stream>>>(p);
  } else {
    ks::attention_simple_kernel<8, T><<<static_cast<unsigned>(blocks), 128, 0, stream>>>(p);
  }
}

template <typename T>
void dispatch(const TensorView& q, const TensorView& k, const TensorView& v, float sm_scale,
              bool causal, const TensorView& o, const TensorView& lse, cudaStream_t stream) {
  const int64_t head_dim = q.size(3);
  bool done = false;
  if (k.size(2) > 0) {
    if (head_dim == 128) {
      done = launch_sm90<T, 128, ATTENTION_PREFILL_D128_STAGES>(q, k, v, sm_scale, causal, o, lse,
                                                                stream);
    } else if (head_dim == 64) {
      done = launch_sm90<T, 64, 4>(q, k, v, sm_scale, causal, o, lse, stream);
    }
  }
  if (!done) launch_simple<T>(q, k, v, sm_scale, causal, o, lse, stream);
}

}  // namespace

void run(TensorView q, TensorView k, TensorView v, double sm_scale, bool causal, TensorView o,
         TensorView lse) {
  TVM_FFI_ICHECK(q.ndim() == 4 && k.ndim() == 4 && v.ndim() == 4 && o.ndim() == 4 &&
                 lse.ndim() == 3)
      << "attention_prefill: q, k, v, o must be 4-D [batch, heads, seq, head_dim], lse 3-D";
  TVM_FFI_ICHECK(q.dtype() == k.dtype() && q.dtype() == v.dtype() && q.dtype() == o.dtype())
      << "attention_prefill: q, k, v and o must have one dtype";
  TVM_FFI_ICHECK(lse.dtype().code == kDLFloat && lse.dtype().bits == 32)
      << "attention_prefill: lse must be float32";
  const int64_t batch = q.size(0), q_heads = q.size(1), seq_q = q.size(2), head_dim = q.size(3);
  const int64_t kv_heads = k.size(1), seq_kv = k.size(2);
  TVM_FFI_ICHECK(k.size(0) == batch && v.size(0) == batch && v.size(1) == kv_heads &&
                 v.size(2) == seq_kv && k.size(3) == head_dim && v.size(3) == head_dim)
      << "attention_prefill: k and v must be [batch, kv_heads, seq_kv, head_dim] like q";
  TVM_FFI_ICHECK(o.size(0) == batch && o.size(1) == q_heads && o.size(2) == seq_q &&
                 o.size(3) == head_dim && lse.size(0) == batch && lse.size(1) == q_heads &&
                 lse.size(2) == seq_q)
      << "attention_prefill: o must be [batch, q_heads, seq_q, head_dim], lse [batch, q_heads, "
         "seq_q]";
  TVM_FFI_ICHECK(kv_heads > 0 && q_heads % kv_heads == 0)
      << "attention_prefill: kv_heads must divide q_heads";
  TVM_FFI_ICHECK(head_dim > 0 && head_dim <= 256) << "attention_prefill: head_dim up to 256";
  TVM_FFI_ICHECK(q.device().device_type == kDLCUDA) << "attention_prefill: tensors on a GPU";
  if (batch == 0 || q_heads == 0 || seq_q == 0) return;
  TVM_FFI_ICHECK(q.stride(3) == 1 && k.stride(3) == 1 && v.stride(3) == 1 && o.stride(3) == 1)
      << "attention_prefill: the last dimension of q, k, v and o must be contiguous";
  auto stream =
      static_cast<cudaStream_t>(TVMFFIEnvGetStream(q.device().device_type, q.device().device_id));
  const DLDataType dtype = q.dtype();
  const float scale = static_cast<float>(sm_scale);
  if (dtype.code == kDLBfloat && dtype.bits == 16) {
    dispatch<__nv_bfloat16>(q, k, v, scale, causal, o, lse, stream);
  } else if (dtype.code == kDLFloat && dtype.bits == 16) {
    dispatch<__half>(q, k, v, scale, causal, o, lse, stream);
  } else {
    TVM_FFI_THROW(TypeError) << "attention_prefill: unsupported dtype (float16 and bfloat16 only)";
  }
  const cudaError_t status = cudaGetLastError();
  TVM_FFI_ICHECK(status == cudaSuccess)
      << "attention_prefill: launch failed: " << cudaGetErrorString(status);
}

TVM_FFI_DLL_EXPORT_TYPED_FUNC(run, run);
