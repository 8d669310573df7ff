// Shared-memory addresses and mbarriers (sm_90: expect_tx) in inline PTX, for the library's
// kernels that move data with TMA or bulk copies: a producer arrives on a stage's "full" barrier
// with the bytes it expects and the copy engine completes them; consumers arrive on its "empty"
// barrier when they are done with it.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

namespace {

// The 32-bit shared-memory address PTX's shared-state instructions take.
__device__ __forceinline__ uint32_t shared_address(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}

__device__ __forceinline__ void mbarrier_init(uint32_t barrier, uint32_t arrivals) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(barrier), "r"(arrivals) : "memory");
}

// Makes the initialised barriers visible to the copy engine (the async proxy) before any use.
__device__ __forceinline__ void mbarrier_init_fence() {
  asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
}

// Arrives and adds ``bytes`` to the transaction count the current phase waits for.
__device__ __forceinline__ void mbarrier_expect_bytes(uint32_t barrier, uint32_t bytes) {
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" ::"r"(barrier), "r"(bytes) : "memory");
}

__device__ __forceinline__ void mbarrier_arrive(uint32_t barrier) {
  asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];\n" ::"r"(barrier) : "memory");
}

// Waits until the phase with the given parity has completed. A fresh barrier is in phase 0 and
// counts its (never started) previous phase, parity 1, as complete: producers start by waiting on
// parity 1 of the empty barriers, which returns at once.
__device__ __forceinline__ void mbarrier_wait(uint32_t barrier, uint32_t parity) {
  asm volatile(
      "{\n"
      ".reg .pred done;\n"
      "WAIT_%=:\n"
      "mbarrier.try_wait.parity.shared::cta.b64 done, [%0], %1;\n"
      "@!done bra WAIT_%=;\n"
      "}\n" ::"r"(barrier),
      "r"(parity)
      : "memory");
}

}  // namespace
