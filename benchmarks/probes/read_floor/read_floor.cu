// Read floors for scripts/probe_read_floor.py: how fast one kernel streams two buffers from HBM,
// launch and ramp included. Plain 16-byte loads (UNROLL in flight per thread and buffer), and
// cp.async.bulk into a ring of shared-memory stages (one contiguous chunk per CTA).
#include <cuda.h>
#include <cuda_runtime.h>
#include <tvm/ffi/container/tensor.h>
#include <tvm/ffi/error.h>
#include <tvm/ffi/extra/c_env_api.h>
#include <tvm/ffi/function.h>
#include <cstdint>

using tvm::ffi::TensorView;

namespace {

// Plain vectorized loads: every thread keeps UNROLL 16-byte loads in flight.
template <int UNROLL>
__global__ void vector_read_kernel(const uint4* __restrict__ a, const uint4* __restrict__ b,
                                   int64_t count, unsigned* sink) {
  unsigned acc = 0;
  const int64_t stride = int64_t(gridDim.x) * blockDim.x;
  int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  for (; i + (UNROLL - 1) * stride < count; i += UNROLL * stride) {
    uint4 va[UNROLL], vb[UNROLL];
#pragma unroll
    for (int u = 0; u < UNROLL; ++u) {
      va[u] = __ldg(a + i + u * stride);
      vb[u] = __ldg(b + i + u * stride);
    }
#pragma unroll
    for (int u = 0; u < UNROLL; ++u) acc ^= va[u].x ^ va[u].w ^ vb[u].y ^ vb[u].z;
  }
  for (; i < count; i += stride) {
    uint4 va = __ldg(a + i), vb = __ldg(b + i);
    acc ^= va.x ^ vb.w;
  }
  if (acc == 0x9e3779b9u) sink[0] = acc;
}

// Contiguous chunk per CTA, streamed with cp.async.bulk into a ring of STAGES buffers of CHUNK
// bytes; one thread issues, all wait on the stage's mbarrier and touch one word per thread.
template <int STAGES, int CHUNK>
__global__ void __launch_bounds__(128) bulk_read_kernel(const char* __restrict__ a,
                                                        const char* __restrict__ b,
                                                        int64_t bytes_each, int64_t per_cta,
                                                        unsigned* sink) {
  extern __shared__ __align__(128) char smem[];
  __shared__ __align__(8) uint64_t full[STAGES];
  const int64_t total = 2 * bytes_each;
  const int64_t begin = int64_t(blockIdx.x) * per_cta;
  const int64_t end = min(begin + per_cta, total);
  if (begin >= end) return;
  const int chunks = int((end - begin + CHUNK - 1) / CHUNK);
  if (threadIdx.x == 0) {
    for (int s = 0; s < STAGES; ++s) {
      unsigned addr = static_cast<unsigned>(__cvta_generic_to_shared(&full[s]));
      asm volatile("mbarrier.init.shared::cta.b64 [%0], 1;" ::"r"(addr));
    }
    asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
  }
  __syncthreads();
  auto issue = [&](int c) {
    const int s = c % STAGES;
    const int64_t offset = begin + int64_t(c) * CHUNK;
    const int size = int(end - offset < CHUNK ? end - offset : int64_t(CHUNK));
    const char* src = offset < bytes_each ? a + offset : b + (offset - bytes_each);
    unsigned bar = static_cast<unsigned>(__cvta_generic_to_shared(&full[s]));
    unsigned dst = static_cast<unsigned>(__cvta_generic_to_shared(smem + s * CHUNK));
    asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(bar), "r"(size)
                 : "memory");
    asm volatile(
        "cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];" ::
            "r"(dst),
        "l"(src), "r"(size), "r"(bar)
        : "memory");
  };
  if (threadIdx.x == 0)
    for (int c = 0; c < min(chunks, STAGES); ++c) issue(c);
  unsigned acc = 0;
  for (int c = 0; c < chunks; ++c) {
    const int s = c % STAGES;
    const unsigned parity = (c / STAGES) & 1;
    unsigned bar = static_cast<unsigned>(__cvta_generic_to_shared(&full[s]));
    asm volatile(
        "{\n.reg .pred p;\nWAIT_%=:\n"
        "mbarrier.try_wait.parity.shared::cta.b64 p, [%0], %1;\n"
        "@!p bra WAIT_%=;\n}\n" ::"r"(bar),
        "r"(parity)
        : "memory");
    acc ^= reinterpret_cast<const unsigned*>(smem + s * CHUNK)[threadIdx.x];
    __syncthreads();  // every thread is done with stage s before it is refilled
    if (threadIdx.x == 0 && c + STAGES < chunks) issue(c + STAGES);
  }
  if (acc == 0x9e3779b9u) sink[0] = acc;
}

cudaStream_t stream_of(const TensorView& t) {
  return static_cast<cudaStream_t>(TVMFFIEnvGetStream(t.device().device_type, t.device().device_id));
}

int sm_count() {
  int device = 0, count = 0;
  cudaGetDevice(&device);
  cudaDeviceGetAttribute(&count, cudaDevAttrMultiProcessorCount, device);
  return count;
}

}  // namespace

// ctas_per_sm x threads CTAs, each thread `unroll` loads of 16 bytes in flight per buffer.
void vector_read(TensorView a, TensorView b, TensorView sink, int64_t ctas_per_sm, int64_t threads,
                 int64_t unroll) {
  const int64_t bytes = a.numel() * a.dtype().bits / 8;
  const int64_t count = bytes / 16;
  const int grid = int(ctas_per_sm * sm_count());
  auto s = stream_of(a);
  auto* pa = static_cast<const uint4*>(a.data_ptr());
  auto* pb = static_cast<const uint4*>(b.data_ptr());
  auto* ps = static_cast<unsigned*>(sink.data_ptr());
  if (unroll == 4)
    vector_read_kernel<4><<<grid, int(threads), 0, s>>>(pa, pb, count, ps);
  else if (unroll == 8)
    vector_read_kernel<8><<<grid, int(threads), 0, s>>>(pa, pb, count, ps);
  else
    vector_read_kernel<2><<<grid, int(threads), 0, s>>>(pa, pb, count, ps);
}

template <int STAGES, int CHUNK>
void launch_bulk(const char* a, const char* b, int64_t bytes, int64_t ctas_per_sm, unsigned* sink,
                 cudaStream_t s) {
  const int grid = int(ctas_per_sm * sm_count());
  const int64_t per_cta = ((2 * bytes + grid - 1) / grid + 15) / 16 * 16;
  const int smem = STAGES * CHUNK;
  auto kernel = bulk_read_kernel<STAGES, CHUNK>;
  cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, smem);
  kernel<<<grid, 128, smem, s>>>(a, b, bytes, per_cta, sink);
}

void bulk_read(TensorView a, TensorView b, TensorView sink, int64_t ctas_per_sm, int64_t stages,
               int64_t chunk_kb) {
  const int64_t bytes = a.numel() * a.dtype().bits / 8;
  auto s = stream_of(a);
  auto* pa = static_cast<const char*>(a.data_ptr());
  auto* pb = static_cast<const char*>(b.data_ptr());
  auto* ps = static_cast<unsigned*>(sink.data_ptr());
  if (stages == 4 && chunk_kb == 16) launch_bulk<4, 16384>(pa, pb, bytes, ctas_per_sm, ps, s);
  else if (stages == 8 && chunk_kb == 16) launch_bulk<8, 16384>(pa, pb, bytes, ctas_per_sm, ps, s);
  else if (stages == 4 && chunk_kb == 32) launch_bulk<4, 32768>(pa, pb, bytes, ctas_per_sm, ps, s);
  else if (stages == 6 && chunk_kb == 32) launch_bulk<6, 32768>(pa, pb, bytes, ctas_per_sm, ps, s);
  else if (stages == 12 && chunk_kb == 8) launch_bulk<12, 8192>(pa, pb, bytes, ctas_per_sm, ps, s);
  else TVM_FFI_THROW(ValueError) << "bulk_read: unsupported stages/chunk";
}

TVM_FFI_DLL_EXPORT_TYPED_FUNC(vector_read, vector_read);
TVM_FFI_DLL_EXPORT_TYPED_FUNC(bulk_read, bulk_read);
