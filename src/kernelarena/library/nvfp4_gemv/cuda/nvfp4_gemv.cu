// nvfp4_gemv in CUDA C++ for Hopper: c[i, 0, l] = sum_k a[i, k, l] sfa[i, k/16, l] b[0, k, l]
// sfb[0, k/16, l], float32 sums rounded once to float16. ``run`` reads sfa/sfb, ``run_permuted``
// the block-scaled copies (same kernel: a scale's address is row part + column part + batch part).
//
// Purely memory-bound (m*k/2 + m*k/16 bytes of A and its scales per call; b is a few KB), so the
// kernel streams A at HBM speed and keeps the decode off the critical path:
// - Decode without an FP4 instruction (cvt for e2m1x2 is sm_100+): PRMT looks up 4 codes at once in
//   8-byte tables (12 + 2a for non-negative codes; 12 - 2|a| on the sign-flipped codes, where the
//   selector's sign-replicate mode zeroes the other table's byte); dp4a multiplies by the int8 2b
//   and sums. Per 8 values: 7 ALU operations (xor, 2 shifts, 4 PRMT) and 4 dp4a on the FMA-heavy
//   pipe. A 16-value block sums exactly in int32; started from magic - 12 * sum(2b), its bits are the
//   float 12582912 + sum(2a * 2b), so two FMAs apply sfb/4 and sfa (e4m3x2 -> half2, sm_89+).
// - b is decoded once per block into registers (int8 2b, start values, sfb as float): each lane
//   always owns the same chunks (16 bytes, 32 values) of every row.
// - A: 16-byte loads (ld.global.nc.L1::no_allocate), coalesced (lane i reads chunk base + i),
//   predicated instead of branched around; the next tile is loaded into a second register buffer
//   before the current one is decoded. 4 chunks a buffer a lane, 2 blocks of <= 256 threads an SM
//   (<= 128 registers): >= 28 KB of A in flight per SM while decoding, twice that while waiting.
// - Persistent blocks (as many as fit at once), each a contiguous range of work items (a tile of
//   rows of one batch) balanced to within one item; b is decoded again only when the batch changes.
// - Per-shape choice from C = k / 32 chunks a row (choose_config): chunks a lane 1 when C <= 32 or
//   128 < C <= 256, else 2; k_warps = ceil(C / (32 * chunks a lane)) <= 8 warps share a row,
//   their partial sums meeting in shared memory (one barrier a tile, double-buffered); 8 / k_warps
//   row groups a block; rows a warp per tile = 4 / chunks a lane (every lane loads 4 chunks).
//     k = 16384: 8 warps x 2 chunks a row, 2 rows a tile (256 threads);
//     k = 7168: 7 warps x 1 chunk, 4 rows a tile (224 threads);
//     k = 2048: 1 warp x 2 chunks a row, 8 row groups, 16 rows a tile (256 threads).
//   Rows longer than 8 warps x 2 chunks (k > 16384) take several passes, without prefetching.
// - Output: a transposed butterfly (kRows - 1 + 5 - log2 kRows shuffles for kRows rows).
// - SASS (nvcc 13, sm_90a): ~1.7 instructions a value for decode, dot and scales; ~1 more per
//   value for addressing, loop and reduction at these tiles; no spills at 120-128 registers.
#include <tvm/ffi/container/tensor.h>
#include <tvm/ffi/error.h>
#include <tvm/ffi/extra/c_env_api.h>
#include <tvm/ffi/function.h>

#include <algorithm>
#include <cstdint>

#include "nvfp4_gemv_details.cuh"

namespace nvfp4_gemv {
namespace {

template <int kChunks>
__global__ void __launch_bounds__(kMaxThreads, 2) gemv_kernel(const Params p) {
  constexpr int kRows = Tile<kChunks>::kRows;
  constexpr int kLog2Rows = log2_rows<kRows>();
  __shared__ float partial[2][kMaxWarps * kRows];

  const int lane_id = threadIdx.x & 31;
  const int warp = threadIdx.x >> 5;
  const int k_warp = warp % p.k_warps;
  const int group = warp / p.k_warps;
  const int groups = (blockDim.x >> 5) / p.k_warps;
  const uint32_t rows_per_tile = groups * kRows;

  const int64_t first = p.items * blockIdx.x / gridDim.x;
  const int64_t last = p.items * (blockIdx.x + 1) / gridDim.x;
  if (first >= last) return;  // the same for the whole block

  // Always 0 ((threadIdx + 1) * m < 2^39), but ptxas cannot tell: the low table words then stay
  // in two registers instead of being copied from a constant before every PRMT.
  const uint32_t zero = static_cast<uint32_t>((static_cast<uint64_t>(threadIdx.x + 1) * p.m) >> 50);
  const uint32_t positive = kPositiveLow + zero;
  const uint32_t negative = kNegativeLow + zero;

  // This warp's rows of a tile start at tile * rows_per_tile + group * kRows.
  auto first_row = [&](Cursor at) { return at.tile * rows_per_tile + group * kRows; };  // < 2^31 + 2^10

  // The warp's kRows partial sums -> outputs: directly when one warp holds a row, else through
  // shared memory (slot by item parity: one barrier a tile is enough).
  auto finish = [&](Cursor at, int64_t item, float (&acc)[kRows]) {
    const float total = transpose_reduce<kRows>(acc, lane_id);
    const int row = (lane_id >> (5 - kLog2Rows)) & (kRows - 1);
    const bool writer = (lane_id & ((32 >> kLog2Rows) - 1)) == 0;
    if (p.k_warps == 1) {
      if (writer) store_row(p, at.batch, first_row(at) + row, total);
      return;
    }
    float* slot = partial[item & 1];
    if (writer) slot[warp * kRows + row] = total;
    __syncthreads();
    if (threadIdx.x < groups * kRows) {
      const int g = threadIdx.x / kRows;
      const int r = threadIdx.x % kRows;
      float sum = 0.0f;
      for (int w = 0; w < p.k_warps; ++w) sum += slot[(g * p.k_warps + w) * kRows + r];
      store_row(p, at.batch, at.tile * rows_per_tile + g * kRows + r, sum);
    }
  };

  Lane<kChunks> lane;
  Vector<kChunks> vector;
  Cursor at{first / p.tiles_per_batch, static_cast<uint32_t>(first % p.tiles_per_batch)};

  if (p.passes > 1) {  // rows longer than one sweep: no prefetch, b decoded per pass
    for (int64_t item = first; item < last; ++item, at = advance(p, at)) {
      float acc[kRows] = {};
      for (int pass = 0; pass < p.passes; ++pass) {
        lane.set(p, pass, k_warp, lane_id);
        Tile<kChunks> tile;
        load_tile(p, lane, at, first_row(at), tile);
        load_vector(p, lane, at.batch, positive, negative, vector);
        accumulate(tile, vector, positive, negative, acc);
      }
      finish(at, item, acc);
    }
    return;
  }

  lane.set(p, 0, k_warp, lane_id);
  Tile<kChunks> even, odd;  // ping-pong buffers, indexed at compile time
  load_tile(p, lane, at, first_row(at), even);  // A first: its round trip overlaps b's
  int64_t vector_batch = at.batch;
  load_vector(p, lane, vector_batch, positive, negative, vector);

  auto process = [&](Cursor here, int64_t item, const Tile<kChunks>& tile) {
    if (here.batch != vector_batch) {
      vector_batch = here.batch;
      load_vector(p, lane, vector_batch, positive, negative, vector);
    }
    float acc[kRows] = {};
    accumulate(tile, vector, positive, negative, acc);
    finish(here, item, acc);
  };

  for (int64_t item = first; item < last; item += 2) {
    const Cursor next = advance(p, at);
    if (item + 1 < last) load_tile(p, lane, next, first_row(next), odd);
    process(at, item, even);
    const Cursor after = advance(p, next);
    if (item + 2 < last) load_tile(p, lane, after, first_row(after), even);
    if (item + 1 < last) process(next, item + 1, odd);
    at = after;
  }
}

struct Config {
  int chunks_per_lane;
  int k_warps;
  int groups;
  int passes;
};

Config choose_config(int64_t chunks) {
  Config config{};
  config.chunks_per_lane = chunks <= 32 || (chunks > 128 && chunks <= 256) ? 1 : 2;
  const int64_t span = 32 * config.chunks_per_lane;
  config.k_warps = static_cast<int>(std::min<int64_t>(kMaxWarps, (chunks + span - 1) / span));
  config.groups = std::max(1, kMaxWarps / config.k_warps);
  const int64_t sweep = int64_t(config.k_warps) * 32 * config.chunks_per_lane;
  config.passes = static_cast<int>((chunks + sweep - 1) / sweep);
  return config;
}

int multiprocessors(int device) {
  static int cached[64] = {};
  if (device < 0 || device >= 64) device = 0;
  if (cached[device] == 0) {
    int count = 0;
    cudaDeviceGetAttribute(&count, cudaDevAttrMultiProcessorCount, device);
    cached[device] = std::max(count, 1);
  }
  return cached[device];
}

template <int kChunks>
void launch_with(const Params& params, const Config& config, int device, cudaStream_t stream) {
  const int threads = 32 * config.k_warps * config.groups;
  static int resident[kMaxWarps + 1] = {};  // blocks per SM, by warps per block
  int& per_sm = resident[threads / 32];
  if (per_sm == 0) {
    int blocks = 0;
    cudaOccupancyMaxActiveBlocksPerMultiprocessor(&blocks, gemv_kernel<kChunks>, threads, 0);
    per_sm = std::max(blocks, 1);
  }
  const int64_t grid = std::min<int64_t>(params.items, int64_t(per_sm) * multiprocessors(device));
  gemv_kernel<kChunks><<<static_cast<unsigned>(grid), threads, 0, stream>>>(params);
}

bool is_byte_type(DLDataType dtype, uint8_t code) {
  return (dtype.code == code || dtype.code == kDLUInt) && dtype.bits * dtype.lanes == 8;
}

const uint8_t* bytes_of(const tvm::ffi::TensorView& t) {
  return static_cast<const uint8_t*>(t.data_ptr()) + t.byte_offset();
}

constexpr int64_t kOffsetLimit = int64_t(1) << 32;  // offsets within a batch are 32-bit

// Strides of row % 32, row / 32 % 4, row / 128, column % 4, column / 4 and batch, in bytes.
struct Strides {
  int64_t r32, r4, r128, c4, c_rest, batch;
};

Strides plain_strides(const tvm::ffi::TensorView& s) {
  return {s.stride(0), 32 * s.stride(0), 128 * s.stride(0), s.stride(1), 4 * s.stride(1), s.stride(2)};
}

Strides permuted_strides(const tvm::ffi::TensorView& s) {
  return {s.stride(0), s.stride(1), s.stride(2), s.stride(3), s.stride(4), s.stride(5)};
}

ScaleLayout scale_layout(const tvm::ffi::TensorView& s, const Strides& d, int64_t rows, int64_t k_scales,
                         const char* name) {
  TVM_FFI_ICHECK(is_byte_type(s.dtype(), kDLFloat8_e4m3fn)) << "nvfp4_gemv: " << name << " must be float8_e4m3fn";
  // A chunk's two scales are read as one 2-byte load: adjacent and 2-byte aligned.
  TVM_FFI_ICHECK(d.c4 == 1) << "nvfp4_gemv: " << name << ": the 4 scales of a column group must be adjacent";
  const int64_t parts = static_cast<int64_t>(reinterpret_cast<uintptr_t>(bytes_of(s))) | d.r32 | d.r4 | d.r128 |
                        d.c_rest | d.batch;
  TVM_FFI_ICHECK(parts % 2 == 0) << "nvfp4_gemv: " << name << " strides and start must be even";
  const int64_t last_row = rows - 1, last_column = k_scales - 1;
  const int64_t largest = std::min<int64_t>(last_row, 31) * d.r32 + std::min<int64_t>(last_row >> 5, 3) * d.r4 +
                          (last_row >> 7) * d.r128 + 3 * d.c4 + (last_column >> 2) * d.c_rest;
  TVM_FFI_ICHECK(d.r32 >= 0 && d.r4 >= 0 && d.r128 >= 0 && d.c_rest >= 0 && largest + 2 <= kOffsetLimit &&
                 32 * d.r32 < kOffsetLimit && 4 * d.r4 < kOffsetLimit)
      << "nvfp4_gemv: " << name << ": more than 4 GB per batch is not supported";
  return ScaleLayout{static_cast<uint32_t>(d.r32), static_cast<uint32_t>(d.r4), static_cast<uint32_t>(d.r128),
                     static_cast<uint32_t>(d.c4), static_cast<uint32_t>(d.c_rest), d.batch};
}

void check_packed(const tvm::ffi::TensorView& t, const char* name) {
  TVM_FFI_ICHECK(is_byte_type(t.dtype(), kDLFloat4_e2m1fn)) << "nvfp4_gemv: " << name << " must be float4_e2m1fn_x2";
  TVM_FFI_ICHECK_EQ(t.stride(1), 1) << "nvfp4_gemv: " << name << " must be contiguous along k";
  const int64_t parts = static_cast<int64_t>(reinterpret_cast<uintptr_t>(bytes_of(t))) | t.stride(0) | t.stride(2);
  TVM_FFI_ICHECK(parts % kChunkBytes == 0) << "nvfp4_gemv: " << name << " rows and batches must start on 16 bytes";
  TVM_FFI_ICHECK(t.stride(0) >= 0 && (t.size(0) - 1) * t.stride(0) + t.size(1) <= kOffsetLimit)
      << "nvfp4_gemv: " << name << ": more than 4 GB per batch is not supported";
}

void launch(tvm::ffi::TensorView a, tvm::ffi::TensorView b, tvm::ffi::TensorView c, tvm::ffi::TensorView sfa,
            tvm::ffi::TensorView sfb, bool permuted) {
  TVM_FFI_ICHECK(a.ndim() == 3 && b.ndim() == 3 && c.ndim() == 3) << "nvfp4_gemv: a, b and c must be 3-D";
  for (const tvm::ffi::TensorView* t : {&a, &b, &c, &sfa, &sfb}) {
    TVM_FFI_ICHECK(t->device().device_type == kDLCUDA && t->device().device_id == a.device().device_id)
        << "nvfp4_gemv: every tensor must be on the GPU of a";
  }
  const int64_t m = a.size(0), k_packed = a.size(1), l = a.size(2);
  TVM_FFI_ICHECK(c.size(0) == m && c.size(1) == 1 && c.size(2) == l) << "nvfp4_gemv: c must be [m, 1, l]";
  TVM_FFI_ICHECK(b.size(0) >= 1 && b.size(1) == k_packed && b.size(2) == l) << "nvfp4_gemv: b must be [n, k/2, l]";
  TVM_FFI_ICHECK(k_packed % 32 == 0 && k_packed > 0 && k_packed <= (int64_t(1) << 26))
      << "nvfp4_gemv: k must be a positive multiple of 64 (at most 2^27)";
  const int64_t k_scales = k_packed / 8;
  if (permuted) {
    TVM_FFI_ICHECK(sfa.ndim() == 6 && sfa.size(0) == 32 && sfa.size(1) == 4 && sfa.size(2) == (m + 127) / 128 &&
                   sfa.size(3) == 4 && sfa.size(4) == k_scales / 4 && sfa.size(5) == l)
        << "nvfp4_gemv: sfa_permuted must be [32, 4, ceil(m/128), 4, k/64, l]";
    TVM_FFI_ICHECK(sfb.ndim() == 6 && sfb.size(0) == 32 && sfb.size(1) == 4 && sfb.size(2) >= 1 &&
                   sfb.size(3) == 4 && sfb.size(4) == k_scales / 4 && sfb.size(5) == l)
        << "nvfp4_gemv: sfb_permuted must be [32, 4, ceil(n/128), 4, k/64, l]";
  } else {
    TVM_FFI_ICHECK(sfa.ndim() == 3 && sfa.size(0) == m && sfa.size(1) == k_scales && sfa.size(2) == l)
        << "nvfp4_gemv: sfa must be [m, k/16, l]";
    TVM_FFI_ICHECK(sfb.ndim() == 3 && sfb.size(0) >= 1 && sfb.size(1) == k_scales && sfb.size(2) == l)
        << "nvfp4_gemv: sfb must be [n, k/16, l]";
  }
  TVM_FFI_ICHECK(c.dtype().code == kDLFloat && c.dtype().bits == 16 && c.dtype().lanes == 1)
      << "nvfp4_gemv: c must be float16";
  if (m == 0 || l == 0) return;
  TVM_FFI_ICHECK(m < (int64_t(1) << 31)) << "nvfp4_gemv: at most 2^31 - 1 rows";
  check_packed(a, "a");
  check_packed(b, "b");
  const ScaleLayout sfa_layout = scale_layout(sfa, permuted ? permuted_strides(sfa) : plain_strides(sfa), m,
                                             k_scales, permuted ? "sfa_permuted" : "sfa");
  const ScaleLayout sfb_layout = scale_layout(sfb, permuted ? permuted_strides(sfb) : plain_strides(sfb), 1,
                                             k_scales, permuted ? "sfb_permuted" : "sfb");

  const int64_t chunks = k_packed / kChunkBytes;
  const Config config = choose_config(chunks);
  const int64_t rows_per_tile = int64_t(config.groups) * (4 / config.chunks_per_lane);
  Params params{};
  params.a = bytes_of(a);
  params.b = bytes_of(b);
  params.sfa = bytes_of(sfa);
  params.sfb = bytes_of(sfb);
  params.c = reinterpret_cast<__half*>(static_cast<uint8_t*>(c.data_ptr()) + c.byte_offset());
  params.m = static_cast<uint32_t>(m);
  params.a_row = static_cast<uint32_t>(a.stride(0));
  params.a_batch = a.stride(2);
  params.b_batch = b.stride(2);
  params.c_row = c.stride(0);
  params.c_batch = c.stride(2);
  params.sfa_layout = sfa_layout;
  params.sfb_layout = sfb_layout;
  params.tiles_per_batch = static_cast<int32_t>((m + rows_per_tile - 1) / rows_per_tile);
  params.items = int64_t(params.tiles_per_batch) * l;
  params.chunks = static_cast<int32_t>(chunks);
  params.k_warps = config.k_warps;
  params.passes = config.passes;

  const int device = a.device().device_id;
  auto stream = static_cast<cudaStream_t>(TVMFFIEnvGetStream(a.device().device_type, device));
  if (config.chunks_per_lane == 1) {
    launch_with<1>(params, config, device, stream);
  } else {
    launch_with<2>(params, config, device, stream);
  }
  const cudaError_t status = cudaGetLastError();
  TVM_FFI_ICHECK(status == cudaSuccess) << "nvfp4_gemv: launch failed: " << cudaGetErrorString(status);
}

}  // namespace
}  // namespace nvfp4_gemv

// GPU MODE's calling convention: (a, b, sfa, sfb, sfa_permuted, sfb_permuted) then c, written.
void run(tvm::ffi::TensorView a, tvm::ffi::TensorView b, tvm::ffi::TensorView sfa, tvm::ffi::TensorView sfb,
         tvm::ffi::TensorView sfa_permuted, tvm::ffi::TensorView sfb_permuted, tvm::ffi::TensorView c) {
  nvfp4_gemv::launch(a, b, c, sfa, sfb, /*permuted=*/false);
}

void run_permuted(tvm::ffi::TensorView a, tvm::ffi::TensorView b, tvm::ffi::TensorView sfa, tvm::ffi::TensorView sfb,
                  tvm::ffi::TensorView sfa_permuted, tvm::ffi::TensorView sfb_permuted, tvm::ffi::TensorView c) {
  nvfp4_gemv::launch(a, b, c, sfa_permuted, sfb_permuted, /*permuted=*/true);
}

TVM_FFI_DLL_EXPORT_TYPED_FUNC(run, run);
TVM_FFI_DLL_EXPORT_TYPED_FUNC(run_permuted, run_permuted);
