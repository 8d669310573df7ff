// Host-side questions about the device, answered once per device for every library kernel.
#pragma once

#include <cuda_runtime.h>

#include <atomic>
#include <cstdint>

namespace {

inline int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

// The SM count of ``device``, asked of the driver once (132, an H100's, if it cannot say).
inline int multiprocessors(int device) {
  static std::atomic<int> cached[64] = {};
  if (device < 0 || device >= 64) return 132;
  int count = cached[device].load(std::memory_order_relaxed);
  if (count == 0) {
    cudaDeviceGetAttribute(&count, cudaDevAttrMultiProcessorCount, device);
    count = count > 0 ? count : 132;
    cached[device].store(count, std::memory_order_relaxed);
  }
  return count;
}

}  // namespace
