// Host side of the NVFP4 GEMV's launch choice (see nvfp4_gemv.cu): the compiled variants, how one
// is launched, and the first-call autotuner that times the candidates on the caller's inputs and
// keeps the winner per (device, m, k, l, scale layout) key for the life of the process.
#pragma once

#include <cuda_runtime.h>

#include <algorithm>
#include <array>
#include <cstdint>
#include <cstdlib>
#include <functional>
#include <map>
#include <mutex>
#include <tuple>
#include <vector>

#include "nvfp4_gemv_kernels.cuh"
#include "nvfp4_gemv_rows.cuh"

namespace nvfp4_gemv {
namespace {

enum class Kind { kRegisters, kRing, kBulk, kRows };

struct VariantSpec {
  Kind kind;
  int stages;      // depth of the cp.async ring, of the bulk-copy stages or of the whole-row kernel's
                   // register ring; 0 for the register kernel
  int min_blocks;  // __launch_bounds__ blocks per SM: <= 65536 / (threads * min_blocks) registers
  const char* name;
  int rows = 0;    // whole-row kernel: rows a group
  int chunks = 1;  // whole-row kernel: chunks a lane and row in a step
};

// Short on purpose (each is timed on the first call of a shape). The register kernel is first:
// it handles every input; the ring kernels need one pass over k and 4-byte aligned scale groups;
// the bulk kernels also the plain scale layout with 16-byte aligned scale rows (k % 256 == 0); the
// whole-row kernels k <= 65536 (kRowsMaxChunks).
constexpr VariantSpec kVariants[] = {
    {Kind::kRegisters, 0, 2, "registers: 16-byte loads double-buffered in registers, 2 blocks/SM"},
    {Kind::kRing, 4, 2, "cp.async ring: 4 stages, 2 blocks/SM"},
    {Kind::kRing, 3, 3, "cp.async ring: 3 stages, 3 blocks/SM"},
    {Kind::kRing, 5, 2, "cp.async ring: 5 stages, 2 blocks/SM"},
    {Kind::kBulk, 4, 2, "bulk copies: 4 stages, 2 blocks/SM"},
    {Kind::kBulk, 6, 2, "bulk copies: 6 stages, 2 blocks/SM"},
    {Kind::kBulk, 8, 1, "bulk copies: 8 stages, 1 block/SM"},
    {Kind::kRows, 2, 2, "whole rows: groups of 4 rows, 2-step register ring, 2 blocks/SM", 4},
    {Kind::kRows, 4, 2, "whole rows: groups of 2 rows, 4-step register ring, 2 blocks/SM", 2},
    {Kind::kRows, 6, 2, "whole rows: 1 row x 2 chunks a step, 6-step register ring, 2 blocks/SM", 1, 2},
};
constexpr int kVariantCount = sizeof(kVariants) / sizeof(kVariants[0]);
// The whole-row kernels keep the decoded vector in shared memory, 56 bytes a chunk: k <= 65536.
constexpr int64_t kRowsMaxChunks = 2048;
constexpr int kDefaultVariant = 7;  // whole rows, 4 a group: used untimed while a stream is being captured

using Kernel = void (*)(Params);

template <int kChunks>
Kernel kernel_for(int variant) {
  switch (variant) {
    case 0:
      return gemv_kernel<kChunks>;
    case 1:
      return gemv_async_kernel<kChunks, kVariants[1].stages, kVariants[1].min_blocks>;
    case 2:
      return gemv_async_kernel<kChunks, kVariants[2].stages, kVariants[2].min_blocks>;
    case 3:
      return gemv_async_kernel<kChunks, kVariants[3].stages, kVariants[3].min_blocks>;
    case 4:
      return gemv_bulk_kernel<kChunks, kVariants[4].stages, kVariants[4].min_blocks>;
    case 5:
      return gemv_bulk_kernel<kChunks, kVariants[5].stages, kVariants[5].min_blocks>;
    case 6:
      return gemv_bulk_kernel<kChunks, kVariants[6].stages, kVariants[6].min_blocks>;
    case 7:
      return gemv_rows_kernel<kVariants[7].rows, kVariants[7].chunks, kVariants[7].stages,
                              kVariants[7].min_blocks>;
    case 8:
      return gemv_rows_kernel<kVariants[8].rows, kVariants[8].chunks, kVariants[8].stages,
                              kVariants[8].min_blocks>;
    case 9:
      return gemv_rows_kernel<kVariants[9].rows, kVariants[9].chunks, kVariants[9].stages,
                              kVariants[9].min_blocks>;
    default:
      return nullptr;
  }
}

// Work split of one call (see choose_config in nvfp4_gemv.cu).
struct Config {
  int chunks_per_lane;
  int k_warps;
  int groups;
  int passes;
};

// Dynamic shared memory of a block of ``threads`` decoding threads. Ring: per thread and stage, 4
// chunks of A (16 bytes) and their scale words (4 bytes). Bulk: per stage the rows of a tile, 4
// chunks of A and their scale pairs (2 bytes) a thread.
constexpr size_t shared_bytes(const VariantSpec& spec, int threads) {
  return spec.kind == Kind::kRing   ? size_t(spec.stages) * 4 * threads * (16 + 4)
         : spec.kind == Kind::kBulk ? size_t(spec.stages) * 4 * threads * (16 + 2)
                                    : 0;
}

int multiprocessors(int device) {
  static std::mutex mutex;
  static std::map<int, int> cached;
  std::lock_guard<std::mutex> lock(mutex);
  int& count = cached[device];
  if (count == 0) {
    cudaDeviceGetAttribute(&count, cudaDevAttrMultiProcessorCount, device);
    count = std::max(count, 1);
  }
  return count;
}

// Blocks of ``threads`` that fit on one SM (0: none); on first sight of a kernel on a device, the
// dynamic shared memory limit is raised to what it can ask for, with shared memory preferred
// over L1 in the carve-out (A bypasses L1; only scales and b use it).
int resident_blocks(const void* kernel, int device, int threads, size_t shared_bytes, size_t shared_limit) {
  static std::mutex mutex;
  static std::map<std::tuple<const void*, int, int, size_t>, int> cached;
  std::lock_guard<std::mutex> lock(mutex);
  const auto key = std::make_tuple(kernel, device, threads, shared_bytes);
  const auto found = cached.find(key);
  if (found != cached.end()) return found->second;
  if (shared_limit > 0) {
    cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(shared_limit));
    cudaFuncSetAttribute(kernel, cudaFuncAttributePreferredSharedMemoryCarveout, cudaSharedmemCarveoutMaxShared);
  }
  int blocks = 0;
  if (cudaOccupancyMaxActiveBlocksPerMultiprocessor(&blocks, kernel, threads, shared_bytes) != cudaSuccess) {
    cudaGetLastError();  // a kernel that cannot be configured here simply does not run
    blocks = 0;
  }
  cached[key] = blocks;
  return blocks;
}

int shared_optin(int device) {
  int bytes = 0;
  cudaDeviceGetAttribute(&bytes, cudaDevAttrMaxSharedMemoryPerBlockOptin, device);
  return bytes;
}

// The whole-row kernel's split of a call (nvfp4_gemv_rows.cuh): blocks_per_batch blocks a batch, so
// that about min_blocks blocks an SM are busy, each a range of the batch's groups of ``rows`` rows;
// k_slices warps a row (a power of 2 <= 8) while a warp would otherwise get fewer than 2 groups
// (its last loads would then weigh too much).
Params rows_split(const VariantSpec& spec, Params p, int64_t l, int device) {
  const int64_t groups = (int64_t(p.m) + spec.rows - 1) / spec.rows, chunks = p.chunks;
  constexpr int64_t kWarps = kMaxWarps, kGroupsCap = 128;
  const int64_t nominal = int64_t(spec.min_blocks) * multiprocessors(device);
  int64_t per_batch = std::clamp<int64_t>(nominal / l, 1, groups);
  int64_t slices = 1;
  const int64_t step_chunks = 32 * int64_t(spec.chunks);
  const auto slice_chunks = [&](int64_t s) {  // rounded up to whole steps
    return ((chunks + s - 1) / s + step_chunks - 1) / step_chunks * step_chunks;
  };
  while (slices < kWarps && (groups / per_batch) * slices < 2 * kWarps &&
         (2 * slices - 1) * slice_chunks(2 * slices) < chunks) {
    slices *= 2;
  }
  if (slices > 1) per_batch = std::max(per_batch, (groups + kGroupsCap - 1) / kGroupsCap);
  p.k_slices = static_cast<int32_t>(slices);
  p.slice_chunks = static_cast<int32_t>(slice_chunks(slices));
  p.blocks_per_batch = static_cast<int32_t>(per_batch);
  p.rows_cap = static_cast<int32_t>((groups + per_batch - 1) / per_batch * spec.rows);
  return p;
}

bool launch_rows(int variant, const Params& params, int device, cudaStream_t stream) {
  const VariantSpec& spec = kVariants[variant];
  const int64_t l = params.items / params.tiles_per_batch;  // items: tiles_per_batch a batch
  const Params p = rows_split(spec, params, l, device);
  const Kernel kernel = kernel_for<1>(variant);
  const size_t shared = shared_vector_bytes(uint32_t(p.k_slices) * p.slice_chunks, p.k_slices, p.rows_cap);
  const int optin = shared_optin(device);
  if (shared > size_t(optin) ||
      resident_blocks(reinterpret_cast<const void*>(kernel), device, kMaxThreads, shared, optin) == 0) {
    return false;
  }
  const int64_t grid = int64_t(p.blocks_per_batch) * l;
  void* arguments[] = {const_cast<Params*>(&p)};
  return cudaLaunchKernel(reinterpret_cast<const void*>(kernel), dim3(static_cast<unsigned>(grid)),
                          dim3(kMaxThreads), arguments, shared, stream) == cudaSuccess;
}

// Launches a variant, persistent: as many blocks as fit at once, at most one per item. False
// (nothing launched) when no block fits or the launch is refused.
bool launch_variant(int variant, const Params& params, const Config& config, int device, cudaStream_t stream) {
  const VariantSpec& spec = kVariants[variant];
  if (spec.kind == Kind::kRows) return launch_rows(variant, params, device, stream);
  const int decoders = 32 * config.k_warps * config.groups;
  const int threads = decoders + (spec.kind == Kind::kBulk ? 32 : 0);  // + the bulk producer warp
  const Kernel kernel = config.chunks_per_lane == 1 ? kernel_for<1>(variant) : kernel_for<2>(variant);
  const size_t shared = shared_bytes(spec, decoders);
  const int per_sm =
      resident_blocks(reinterpret_cast<const void*>(kernel), device, threads, shared, shared_bytes(spec, kMaxThreads));
  if (per_sm == 0) return false;
  const int64_t grid = std::min<int64_t>(params.items, int64_t(per_sm) * multiprocessors(device));
  void* arguments[] = {const_cast<Params*>(&params)};
  return cudaLaunchKernel(reinterpret_cast<const void*>(kernel), dim3(static_cast<unsigned>(grid)), dim3(threads),
                          arguments, shared, stream) == cudaSuccess;
}

// Reads a buffer twice the L2 so that the next kernel finds its inputs in device memory, as in a
// model, and leaves clean lines (a memset would leave the L2 full of dirty ones to write back).
__global__ void read_through_kernel(const uint4* data, int64_t count, uint4* sink, uint32_t marker) {
  uint32_t mixed = 0;
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < count; i += int64_t(gridDim.x) * blockDim.x) {
    const uint4 v = __ldcg(data + i);
    mixed ^= v.x ^ v.y ^ v.z ^ v.w;
  }
  if (mixed == marker) sink[0] = make_uint4(mixed, 0, 0, 0);  // keeps the reads; harmless if taken
}

// The choice per key, and the environment override (KERNELARENA_NVFP4_GEMV_VARIANT=i).
using ChoiceKey = std::array<int64_t, 7>;  // device, m, k/2, l, permuted, ring and bulk eligible

std::mutex& choice_mutex() {
  static std::mutex mutex;
  return mutex;
}

std::map<ChoiceKey, int>& choices() {
  static std::map<ChoiceKey, int> made;
  return made;
}

// -1: not set; -2: set but not a variant index.
int forced_variant() {
  static const int forced = [] {
    const char* text = std::getenv("KERNELARENA_NVFP4_GEMV_VARIANT");
    if (text == nullptr || *text == '\0') return -1;
    char* end = nullptr;
    const long value = std::strtol(text, &end, 10);
    return (*end == '\0' && value >= 0 && value < kVariantCount) ? static_cast<int>(value) : -2;
  }();
  return forced;
}

// Times every candidate on the caller's stream and inputs (the output is overwritten, the inputs
// only read): one warm-up call each, then up to 7 rounds, each candidate once a round after an
// L2 flush, candidates interleaved so that clock or temperature drift favours none; the median
// decides. Where A and sfa (``streamed_bytes``) exceed the L2, a sample is a burst of 4
// back-to-back calls, which still stream from HBM: a lone call after a flush ranks the variants
// unlike CUDA graph replays of the library's calls (the benchmark, a model) do, bursts of 4 like
// them (docs/kernels/nvfp4_gemv.md). Where they fit in the L2, the later calls of a burst would
// find A there, so a sample is one call (KERNELARENA_NVFP4_GEMV_TUNE_BURST=1..8 overrides).
// Rounds fit in ~20 ms; the winner runs last, so ``c`` holds its result. Returns the winner, or -1
// when nothing could be timed.
int tune(const std::vector<int>& candidates, const std::function<bool(int)>& launch, int64_t streamed_bytes,
         int device, cudaStream_t stream) {
  int l2_bytes = 0;
  cudaDeviceGetAttribute(&l2_bytes, cudaDevAttrL2CacheSize, device);
  static const int forced_burst = [] {
    const char* text = std::getenv("KERNELARENA_NVFP4_GEMV_TUNE_BURST");
    return text != nullptr && std::atoi(text) > 0 ? std::min(std::atoi(text), 8) : 0;
  }();
  const int burst = forced_burst > 0 ? forced_burst : streamed_bytes > l2_bytes ? 4 : 1;
  const int64_t flush_vectors = std::max<int64_t>(int64_t(2) * l2_bytes, int64_t(64) << 20) / 16;
  uint4* scratch = nullptr;
  if (cudaMalloc(&scratch, flush_vectors * 16) != cudaSuccess) {
    cudaGetLastError();  // no room: time without flushing
    scratch = nullptr;
  }
  const int flush_blocks = 4 * multiprocessors(device);
  const double flush_ms = scratch != nullptr ? double(flush_vectors) * 16 / 2e9 : 0.0;  // at >= 2 TB/s

  std::vector<int> alive;
  for (int variant : candidates) {
    if (launch(variant)) alive.push_back(variant);  // warm-up; a variant that cannot launch drops out
  }
  cudaGetLastError();
  std::vector<cudaEvent_t> begin(alive.size()), end(alive.size());
  for (size_t i = 0; i < alive.size(); ++i) {
    cudaEventCreate(&begin[i]);
    cudaEventCreate(&end[i]);
  }
  std::vector<std::vector<float>> samples(alive.size());
  int rounds = 1;
  for (int round = 0; round < rounds && !alive.empty(); ++round) {
    for (size_t i = 0; i < alive.size(); ++i) {
      if (scratch != nullptr) {
        read_through_kernel<<<flush_blocks, 256, 0, stream>>>(scratch, flush_vectors, scratch, 0x9E3779B9u);
      }
      cudaEventRecord(begin[i], stream);
      bool launched = true;
      for (int call = 0; call < burst; ++call) launched = launch(alive[i]) && launched;
      cudaEventRecord(end[i], stream);
      if (!launched) samples[i].push_back(1e30f);
    }
    if (cudaEventSynchronize(end.back()) != cudaSuccess) break;
    double round_ms = 0.0;
    for (size_t i = 0; i < alive.size(); ++i) {
      float ms = 1e30f;
      if (cudaEventElapsedTime(&ms, begin[i], end[i]) != cudaSuccess) ms = 1e30f;
      if (samples[i].size() <= static_cast<size_t>(round)) samples[i].push_back(ms / burst);
      round_ms += std::min(double(ms), 1e3) + flush_ms;
    }
    if (round == 0) rounds = std::clamp(static_cast<int>(20.0 / std::max(round_ms, 1e-3)), 1, 7) | 1;
  }
  cudaGetLastError();
  for (size_t i = 0; i < alive.size(); ++i) {
    cudaEventDestroy(begin[i]);
    cudaEventDestroy(end[i]);
  }
  if (scratch != nullptr) cudaFree(scratch);

  int best = -1;
  float best_ms = 0.0f;
  for (size_t i = 0; i < alive.size(); ++i) {
    std::vector<float> ordered = samples[i];
    if (ordered.empty()) continue;
    std::sort(ordered.begin(), ordered.end());
    const float median = ordered[ordered.size() / 2];
    if (median < 1e30f && (best < 0 || median < best_ms)) {
      best = alive[i];
      best_ms = median;
    }
  }
  if (best >= 0 && !launch(best)) best = -1;
  return best;
}

// The variant for this call, and whether it already ran on these inputs (during tuning). The
// first call of a key tunes unless the stream is being captured into a CUDA graph, where
// nothing may synchronize: then the default runs and nothing is remembered.
std::pair<int, bool> choose_variant(const ChoiceKey& key, const std::vector<int>& candidates,
                                    const std::function<bool(int)>& launch, int device, cudaStream_t stream) {
  std::lock_guard<std::mutex> lock(choice_mutex());
  const auto found = choices().find(key);
  if (found != choices().end()) return {found->second, false};
  const bool has_default = std::find(candidates.begin(), candidates.end(), kDefaultVariant) != candidates.end();
  const int fallback = has_default ? kDefaultVariant : candidates.front();
  if (candidates.size() == 1) {
    choices()[key] = fallback;
    return {fallback, false};
  }
  cudaStreamCaptureStatus capture = cudaStreamCaptureStatusNone;
  if (cudaStreamIsCapturing(stream, &capture) != cudaSuccess) {
    cudaGetLastError();
    capture = cudaStreamCaptureStatusActive;
  }
  if (capture != cudaStreamCaptureStatusNone) return {fallback, false};
  const int64_t streamed_bytes = key[1] * key[2] * key[3] / 8 * 9;  // m * k/2 * l of A, + 1/8 for sfa
  const int best = tune(candidates, launch, streamed_bytes, device, stream);
  if (best < 0) return {fallback, false};
  choices()[key] = best;
  return {best, true};
}

// The remembered choice for (m, k/2, l, permuted) on any device, or -1.
int remembered_variant(int64_t m, int64_t k_packed, int64_t l, bool permuted) {
  std::lock_guard<std::mutex> lock(choice_mutex());
  for (const auto& [key, variant] : choices()) {
    if (key[1] == m && key[2] == k_packed && key[3] == l && key[4] == int64_t(permuted)) return variant;
  }
  return -1;
}

}  // namespace
}  // namespace nvfp4_gemv
