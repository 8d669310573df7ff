// nvfp4_gemv in CUDA C++ for Hopper: c[i, 0, l] = sum_k a[i, k, l] sfa[i, k/16, l] b[0, k, l]
// sfb[0, k/16, l], float32 sums rounded once to float16. ``run`` reads sfa/sfb, ``run_permuted``
// the block-scaled copies (same kernels: a scale's address is row part + column part + batch part).
//
// Purely memory-bound (m*k/2 + m*k/16 bytes of A and its scales per call; b is a few KB), so the
// kernels stream A at HBM speed and keep the decode off the critical path. Measurements and what
// was tried: docs/kernels/nvfp4_gemv.md.
// - Decode without an FP4 instruction (cvt for e2m1x2 is sm_100+; _shared/nvfp4_decode.cuh): PRMT
//   looks up 4 codes at once in 8-byte tables, dp4a multiplies by the int8 2b and sums. Per 8
//   values: 7 ALU operations (xor, 2 shifts, 4 PRMT) and 4 dp4a on the FMA-heavy pipe. A 16-value
//   block sums exactly in int32; started from magic - 12 * sum(2b), its bits are the float
//   12582912 + sum(2a * 2b), so two FMAs apply sfb/4 and sfa (e4m3x2 -> half2, sm_89+).
// - Variants 0-6 (nvfp4_gemv_kernels.cuh): b is decoded once per block and batch into registers
//   (int8 2b, start values, sfb as float): each lane always owns the same chunks (16 bytes, 32
//   values) of every row. Persistent blocks (as many as fit at once), each a contiguous range of
//   work items (a tile of rows of one batch) balanced to within one item. Variants 7-9
//   (nvfp4_gemv_rows.cuh) keep b in shared memory instead and give each warp whole rows.
// - Work split of 0-6 from C = k / 32 chunks a row (choose_config): chunks a lane 1 when C <= 32 or
//   128 < C <= 256, else 2; k_warps = ceil(C / (32 * chunks a lane)) <= 8 warps share a row,
//   their partial sums meeting in shared memory (one barrier a tile, double-buffered); 8 / k_warps
//   row groups a block; rows a warp per tile = 4 / chunks a lane (every lane reads 4 chunks).
//     k = 16384: 8 warps x 2 chunks a row, 2 rows a tile (256 threads);
//     k = 7168: 7 warps x 1 chunk, 4 rows a tile (224 threads);
//     k = 2048: 1 warp x 2 chunks a row, 8 row groups, 16 rows a tile (256 threads).
// - How A reaches the registers: the variants (nvfp4_gemv_tuner.cuh), one kernel each.
//   0, registers: 16-byte loads (ld.global.nc.L1::no_allocate) of the next tile into a second
//     register buffer while the current one is decoded. In flight: 64 bytes a thread, ~32 KB an
//     SM, below the ~32-50 KB an SM that Hopper's bandwidth x loaded latency asks for: ~60% of the
//     copy bandwidth. It is the only one for rows longer than one sweep (k > 16384, several
//     passes, no prefetch) and for scale tensors whose 4-scale groups are not 4-byte aligned.
//   1-3, cp.async ring: each thread keeps its next S tiles of A and their scale words in flight
//     into its own shared-memory slots (cp.async.cg 16 bytes, cp.async.ca 4 bytes, zero-filled
//     past the row) and decodes from shared memory; thread-private slots need no barrier, only
//     cp.async.wait_group. In flight an SM while decoding: (S - 1) x 64 bytes x threads: 96 KB
//     at S = 4 and 2 blocks of 256 threads (1: 160 KB of ring an SM), 98 KB at S = 3 and 3
//     blocks (2: 184 KB, <= 85 registers), 128 KB at S = 5 and 2 blocks (3: 205 KB), i.e. 3-4x
//     the register kernel's, independent of registers.
//   4-6, bulk copies (cp.async.bulk, mbarriers): a producer warp moves whole rows of a tile of A
//     and of sfa into 4-8 shared-memory stages; the decoding warps only read shared memory. They
//     stream as fast as the ring: with 100+ KB in flight an SM, what limits the dp4a kernels is
//     their ~2.8 instructions a value, not the memory.
//   7-9, whole rows (nvfp4_gemv_rows.cuh), for that reason: the kernels above spend ~3.3
//     instructions a value, ~1.4 of them decoding and the rest on copy addresses (general scale
//     layouts, 64-bit arithmetic), ring reads and a cross-warp reduction with a barrier every
//     tile. Here a warp owns whole rows: groups of kRows consecutive rows (aligned to kRows, so a
//     group's scales are r32 bytes apart in both layouts), swept along k alone, or with 2-8 warps
//     each a slice of k when a warp would otherwise get fewer than 2 groups (the slices meet once,
//     at the end, in shared memory). b is decoded once per block into shared memory (int8 2b,
//     dp4a start, sfb / 4 and -magic sfb / 4: 56 bytes a chunk, lane-contiguous, so k <= 65536),
//     read with 4 conflict-free loads a chunk and shared by the group's rows. A and the scale
//     pairs go through a register ring of 2-6 steps (16-byte ld.global.nc, predicated), addresses
//     advanced from the group's first row; the vector's first chunks are requested before A so
//     that they are not queued behind it. SASS: ~2.3 instructions a value (4 rows a group), 1.5
//     of them the decode, which is what sets the pace (the same loads without it run ~4 us
//     faster on the large shapes). Shallow rings (2 steps at 4 rows, 4 at 2 rows) measured
//     fastest: their last loads leave less to decode after the memory has finished.
// - The choice (nvfp4_gemv_tuner.cuh): the first call of a (device, m, k, l, scale layout) key
//   times every variant that applies on the caller's inputs (CUDA events, the L2 flushed by a
//   read of twice its size before each burst of 4 calls, up to 7 interleaved rounds, the median
//   deciding; ~20 ms) and remembers the winner; later calls cost a map lookup. Deterministic
//   thereafter.
//   A first call inside CUDA graph capture cannot synchronize: it runs variant 7 (else 0)
//   untimed. KERNELARENA_NVFP4_GEMV_VARIANT=i forces variant i where it applies; ``run_variant``
//   runs one explicitly (tests), ``chosen_variant`` reports the choice (benchmark).
// - Output: a transposed butterfly (kRows - 1 + 5 - log2 kRows shuffles for kRows rows).
// - The sums over the k_warps of a row are made by a different warp each tile (finish_tile), so
//   that this extra work no longer delays one warp, and through the barrier the block, every tile.
#include <tvm/ffi/container/tensor.h>
#include <tvm/ffi/error.h>
#include <tvm/ffi/extra/c_env_api.h>
#include <tvm/ffi/function.h>
#include <tvm/ffi/string.h>

#include <algorithm>
#include <cstdint>
#include <vector>

#include "nvfp4_gemv_tuner.cuh"

namespace nvfp4_gemv {
namespace {

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

// The ring kernels read a chunk's scale pair from the 4-byte word of its 4-scale group: every
// part of the scale address must keep 4-byte alignment.
bool groups_aligned(const tvm::ffi::TensorView& s, const Strides& d) {
  const int64_t parts = static_cast<int64_t>(reinterpret_cast<uintptr_t>(bytes_of(s))) | d.r32 | d.r4 | d.r128 |
                        d.c_rest | d.batch;
  return parts % 4 == 0;
}

// The bulk kernels copy each row's scales (k/16 bytes, plain layout) in one piece: its length and
// every part of its address must be multiples of 16 bytes.
bool bulk_rows_aligned(const tvm::ffi::TensorView& s, const Strides& d, int64_t k_scales) {
  const int64_t parts = static_cast<int64_t>(reinterpret_cast<uintptr_t>(bytes_of(s))) | d.r32 | d.batch | k_scales;
  return d.c4 == 1 && parts % 16 == 0;
}

// Restores the caller's current device: launches, occupancy queries and allocations then go to
// the device of the tensors.
struct DeviceGuard {
  int previous = -1;
  explicit DeviceGuard(int device) {
    int current = device;
    cudaGetDevice(&current);
    if (current != device && cudaSetDevice(device) == cudaSuccess) previous = current;
  }
  ~DeviceGuard() {
    if (previous >= 0) cudaSetDevice(previous);
  }
};

// ``variant`` -1 chooses (tuning on the first call of a shape); else runs that variant and
// returns false, launching nothing, when it does not apply to these inputs.
bool launch(tvm::ffi::TensorView a, tvm::ffi::TensorView b, tvm::ffi::TensorView c, tvm::ffi::TensorView sfa,
            tvm::ffi::TensorView sfb, bool permuted, int variant) {
  TVM_FFI_ICHECK(variant >= -1 && variant < kVariantCount)
      << "nvfp4_gemv: variant " << variant << " is not one of 0.." << kVariantCount - 1;
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
  TVM_FFI_ICHECK(forced_variant() != -2)
      << "nvfp4_gemv: KERNELARENA_NVFP4_GEMV_VARIANT must be one of 0.." << kVariantCount - 1;
  if (m == 0 || l == 0) return true;
  TVM_FFI_ICHECK(m < (int64_t(1) << 31)) << "nvfp4_gemv: at most 2^31 - 1 rows";
  check_packed(a, "a");
  check_packed(b, "b");
  const Strides sfa_strides = permuted ? permuted_strides(sfa) : plain_strides(sfa);
  const ScaleLayout sfa_layout = scale_layout(sfa, sfa_strides, m, k_scales, permuted ? "sfa_permuted" : "sfa");
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

  const bool ring_ok = config.passes == 1 && groups_aligned(sfa, sfa_strides);
  const bool bulk_ok = ring_ok && !permuted && bulk_rows_aligned(sfa, sfa_strides, k_scales);
  const bool rows_ok = chunks <= kRowsMaxChunks;
  std::vector<int> candidates;
  for (int v = 0; v < kVariantCount; ++v) {
    const Kind kind = kVariants[v].kind;
    if (kind == Kind::kRegisters || (kind == Kind::kRing && ring_ok) || (kind == Kind::kBulk && bulk_ok) ||
        (kind == Kind::kRows && rows_ok)) {
      candidates.push_back(v);
    }
  }
  const auto applies = [&](int v) { return std::find(candidates.begin(), candidates.end(), v) != candidates.end(); };
  if (variant >= 0 && !applies(variant)) return false;  // run_variant with one that does not apply
  if (variant < 0 && forced_variant() >= 0) variant = applies(forced_variant()) ? forced_variant() : 0;

  const int device = a.device().device_id;
  const DeviceGuard guard(device);
  auto stream = static_cast<cudaStream_t>(TVMFFIEnvGetStream(a.device().device_type, device));
  auto run_one = [&](int v) { return launch_variant(v, params, config, device, stream); };
  bool ran = false;
  if (variant < 0) {
    const ChoiceKey key{device, m, k_packed, l, permuted ? 1 : 0, ring_ok ? 1 : 0, bulk_ok ? 1 : 0};
    std::tie(variant, ran) = choose_variant(key, candidates, run_one, device, stream);
  }
  const bool launched = ran || run_one(variant);
  const cudaError_t status = cudaGetLastError();
  TVM_FFI_ICHECK(launched && status == cudaSuccess)
      << "nvfp4_gemv: variant " << variant << " did not launch (no block fits, or " << cudaGetErrorString(status)
      << ")";
  return true;
}

}  // namespace
}  // namespace nvfp4_gemv

// GPU MODE's calling convention: (a, b, sfa, sfb, sfa_permuted, sfb_permuted) then c, written.
void run(tvm::ffi::TensorView a, tvm::ffi::TensorView b, tvm::ffi::TensorView sfa, tvm::ffi::TensorView sfb,
         tvm::ffi::TensorView sfa_permuted, tvm::ffi::TensorView sfb_permuted, tvm::ffi::TensorView c) {
  nvfp4_gemv::launch(a, b, c, sfa, sfb, /*permuted=*/false, /*variant=*/-1);
}

void run_permuted(tvm::ffi::TensorView a, tvm::ffi::TensorView b, tvm::ffi::TensorView sfa, tvm::ffi::TensorView sfb,
                  tvm::ffi::TensorView sfa_permuted, tvm::ffi::TensorView sfb_permuted, tvm::ffi::TensorView c) {
  nvfp4_gemv::launch(a, b, c, sfa_permuted, sfb_permuted, /*permuted=*/true, /*variant=*/-1);
}

// Tests and benchmarks: one variant explicitly (false, launching nothing, where it does not apply:
// k > 16384, or scale groups not 4-byte aligned, for the ring variants); the variants; the choice.
bool run_variant(tvm::ffi::TensorView a, tvm::ffi::TensorView b, tvm::ffi::TensorView sfa, tvm::ffi::TensorView sfb,
                 tvm::ffi::TensorView sfa_permuted, tvm::ffi::TensorView sfb_permuted, tvm::ffi::TensorView c,
                 int64_t variant, bool permuted) {
  TVM_FFI_ICHECK(variant >= 0 && variant < nvfp4_gemv::kVariantCount)
      << "nvfp4_gemv: variant " << variant << " is not one of 0.." << nvfp4_gemv::kVariantCount - 1;
  return permuted ? nvfp4_gemv::launch(a, b, c, sfa_permuted, sfb_permuted, true, static_cast<int>(variant))
                  : nvfp4_gemv::launch(a, b, c, sfa, sfb, false, static_cast<int>(variant));
}

int64_t variant_count() { return nvfp4_gemv::kVariantCount; }

// "registers", "ring", "bulk" or "rows": which inputs a variant applies to (see kVariants).
tvm::ffi::String variant_kind(int64_t variant) {
  TVM_FFI_ICHECK(variant >= 0 && variant < nvfp4_gemv::kVariantCount) << "nvfp4_gemv: no variant " << variant;
  switch (nvfp4_gemv::kVariants[variant].kind) {
    case nvfp4_gemv::Kind::kRegisters:
      return tvm::ffi::String("registers");
    case nvfp4_gemv::Kind::kRing:
      return tvm::ffi::String("ring");
    case nvfp4_gemv::Kind::kRows:
      return tvm::ffi::String("rows");
    default:
      return tvm::ffi::String("bulk");
  }
}

tvm::ffi::String variant_name(int64_t variant) {
  TVM_FFI_ICHECK(variant >= 0 && variant < nvfp4_gemv::kVariantCount) << "nvfp4_gemv: no variant " << variant;
  return tvm::ffi::String(nvfp4_gemv::kVariants[variant].name);
}

// The variant remembered for (m, k, l) and a scale layout; -1 before the first call.
int64_t chosen_variant(int64_t m, int64_t k, int64_t l, bool permuted) {
  return nvfp4_gemv::remembered_variant(m, k / 2, l, permuted);
}

TVM_FFI_DLL_EXPORT_TYPED_FUNC(run, run);
TVM_FFI_DLL_EXPORT_TYPED_FUNC(run_permuted, run_permuted);
TVM_FFI_DLL_EXPORT_TYPED_FUNC(run_variant, run_variant);
TVM_FFI_DLL_EXPORT_TYPED_FUNC(variant_count, variant_count);
TVM_FFI_DLL_EXPORT_TYPED_FUNC(variant_name, variant_name);
TVM_FFI_DLL_EXPORT_TYPED_FUNC(variant_kind, variant_kind);
TVM_FFI_DLL_EXPORT_TYPED_FUNC(chosen_variant, chosen_variant);
