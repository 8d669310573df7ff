// The two NVFP4 GEMV kernels (see nvfp4_gemv.cu for the design): both persistent, each block a
// contiguous range of work items (a tile of rows of one batch), b decoded into registers once per
// batch, the same decode and reduction; they differ in how A reaches the registers.
#pragma once

#include "nvfp4_gemv_details.cuh"

namespace nvfp4_gemv {

// Items [first, last) of this block: p.items split evenly over the grid, to within one.
__device__ __forceinline__ int64_t first_item(const Params& p, unsigned block) {
  return p.items * block / gridDim.x;
}

// Registers: 16-byte loads of the next tile into a second register buffer before the current one
// is decoded (ping-pong). In flight per thread: one tile (kRows x kChunks chunks, 64 bytes).
// Rows longer than one sweep (passes > 1) are only handled here, without prefetch.
template <int kChunks>
__global__ void __launch_bounds__(kMaxThreads, 2) gemv_kernel(const Params p) {
  constexpr int kRows = Tile<kChunks>::kRows;
  __shared__ float partial[2][kMaxWarps * kRows];

  const Team team = make_team(p, kRows, static_cast<int>(blockDim.x >> 5));
  const int64_t first = first_item(p, blockIdx.x);
  const int64_t last = first_item(p, blockIdx.x + 1);
  if (first >= last) return;  // the same for the whole block

  const uint32_t zero = opaque_zero(p.m);
  const uint32_t positive = kPositiveLow + zero;
  const uint32_t negative = kNegativeLow + zero;

  Lane<kChunks> lane;
  Vector<kChunks> vector;
  Cursor at{first / p.tiles_per_batch, static_cast<uint32_t>(first % p.tiles_per_batch)};
  int reducer = 0;

  if (p.passes > 1) {  // rows longer than one sweep: no prefetch, b decoded per pass
    for (int64_t item = first; item < last; ++item, at = advance(p, at)) {
      float acc[kRows] = {};
      for (int pass = 0; pass < p.passes; ++pass) {
        lane.set(p, pass, team.k_warp, team.lane);
        Tile<kChunks> tile;
        load_tile(p, lane, at, warp_first_row(team, at, kRows), tile);
        load_vector(p, lane, at.batch, positive, negative, vector);
        accumulate(tile, vector, positive, negative, acc);
      }
      finish_tile<kRows>(p, team, partial, at, item, reducer, acc);
      reducer = next_reducer(team, reducer);
    }
    return;
  }

  lane.set(p, 0, team.k_warp, team.lane);
  Tile<kChunks> even, odd;  // ping-pong buffers, indexed at compile time
  load_tile(p, lane, at, warp_first_row(team, at, kRows), even);  // A first: its round trip overlaps b's
  int64_t vector_batch = at.batch;
  load_vector(p, lane, vector_batch, positive, negative, vector);

  auto process = [&](Cursor here, int64_t item, const Tile<kChunks>& tile) {
    if (here.batch != vector_batch) {
      vector_batch = here.batch;
      load_vector(p, lane, vector_batch, positive, negative, vector);
    }
    float acc[kRows] = {};
    accumulate(tile, vector, positive, negative, acc);
    finish_tile<kRows>(p, team, partial, here, item, reducer, acc);
    reducer = next_reducer(team, reducer);
  };

  for (int64_t item = first; item < last; item += 2) {
    const Cursor next = advance(p, at);
    if (item + 1 < last) load_tile(p, lane, next, warp_first_row(team, next, kRows), odd);
    process(at, item, even);
    const Cursor after = advance(p, next);
    if (item + 2 < last) load_tile(p, lane, after, warp_first_row(team, after, kRows), even);
    if (item + 1 < last) process(next, item + 1, odd);
    at = after;
  }
}

// Shared-memory ring: each thread keeps its next kStages tiles of A (and their scale groups) in
// flight with cp.async into its own slots, independent of registers, and decodes from shared
// memory. In flight per thread while it decodes: kStages - 1 tiles (64 bytes of A each). One
// pass only (the host checks passes == 1). Dynamic shared memory: kStages * kRows * kChunks *
// blockDim.x * 20 bytes (A chunks first, then the scale words).
template <int kChunks, int kStages, int kMinBlocks>
__global__ void __launch_bounds__(kMaxThreads, kMinBlocks) gemv_async_kernel(const Params p) {
  constexpr int kRows = Tile<kChunks>::kRows;
  constexpr int kSlots = kRows * kChunks;
  __shared__ float partial[2][kMaxWarps * kRows];
  extern __shared__ uint4 ring[];

  const Team team = make_team(p, kRows, static_cast<int>(blockDim.x >> 5));
  const int64_t first = first_item(p, blockIdx.x);
  const int64_t last = first_item(p, blockIdx.x + 1);
  if (first >= last) return;  // the same for the whole block

  const uint32_t zero = opaque_zero(p.m);
  const uint32_t positive = kPositiveLow + zero;
  const uint32_t negative = kNegativeLow + zero;

  const uint32_t threads = blockDim.x;
  const uint32_t stage_slots = kSlots * threads;  // elements a stage, per array
  const uint4* a_ring = ring + threadIdx.x;
  const uint32_t* s_ring = reinterpret_cast<const uint32_t*>(ring + kStages * stage_slots) + threadIdx.x;
  const uint16_t* pair_ring = reinterpret_cast<const uint16_t*>(s_ring) + (team.lane & 1);
  const uint32_t a_ring_shared = shared_address(a_ring);
  const uint32_t s_ring_shared = shared_address(s_ring);

  Lane<kChunks> lane;
  lane.set(p, 0, team.k_warp, team.lane);
  Cursor at{first / p.tiles_per_batch, static_cast<uint32_t>(first % p.tiles_per_batch)};
  Cursor ahead = at;  // the next tile to copy
  int64_t copied = first;
  int64_t copy_batch = -1;  // the batch of copy_a and copy_s
  const uint8_t* copy_a = p.a;
  const uint8_t* copy_s = p.sfa;

  // Copies the next tile (if any) into a stage; always commits a group (possibly empty), so
  // that group g is tile first + g and wait_copies<kStages - 1> before tile j finds it complete.
  auto copy_next = [&](uint32_t stage) {
    if (copied < last) {
      if (ahead.batch != copy_batch) {
        copy_batch = ahead.batch;
        copy_a = p.a + copy_batch * p.a_batch;
        copy_s = p.sfa + copy_batch * p.sfa_layout.batch;
      }
      copy_tile(p, lane, copy_a, copy_s, warp_first_row(team, ahead, kRows), a_ring_shared + stage * stage_slots * 16u,
                s_ring_shared + stage * stage_slots * 4u, threads * 16u, threads * 4u);
      ahead = advance(p, ahead);
      ++copied;
    }
    commit_copies();
  };

#pragma unroll 1
  for (uint32_t stage = 0; stage < kStages; ++stage) copy_next(stage);
  // b after A: its round trip overlaps the ring's.
  Vector<kChunks> vector;
  int64_t vector_batch = at.batch;
  load_vector(p, lane, vector_batch, positive, negative, vector);

  uint32_t stage = 0;
  int reducer = 0;
#pragma unroll 1
  for (int64_t item = first; item < last; ++item) {
    wait_copies<kStages - 1>();
    Tile<kChunks> tile;
    read_tile(a_ring + stage * stage_slots, pair_ring + 2 * stage * stage_slots, threads, tile);
    if (at.batch != vector_batch) {
      vector_batch = at.batch;
      load_vector(p, lane, vector_batch, positive, negative, vector);
    }
    float acc[kRows] = {};
    accumulate(tile, vector, positive, negative, acc);
    finish_tile<kRows>(p, team, partial, at, item, reducer, acc);
    reducer = next_reducer(team, reducer);
    // Refill the stage just read only now: its values were consumed above, so the new copy
    // cannot overwrite them before they reached registers.
    copy_next(stage);
    stage = stage + 1 == kStages ? 0 : stage + 1;
    at = advance(p, at);
  }
  wait_copies<0>();  // only empty groups remain; nothing may be in flight when the block exits
}

// Bulk copies: one producer warp (the block's last) moves each tile's rows of A and of sfa into
// a ring of kStages shared-memory stages with cp.async.bulk, one lane a row, and the decoding warps
// (all the others) read them from there. A stage's "full" barrier completes when its bytes have
// landed; its "empty" barrier when every decoding warp has its share in registers, after which
// the producer refills it. In flight an SM: up to (kStages - 1) stages a block, ~16-18 KB each,
// with no thread waiting on them. The plain scale layout only, rows of sfa 16-byte aligned and a
// multiple of 16 bytes long (k % 256 == 0; the host checks), one pass over k.
// A stage: rows_per_tile slots of ``sweep`` chunks (16 bytes) of A, then as many slots of 2 * sweep
// scale bytes; a lane's chunks past the row hold stale bytes and are replaced by zeros on reading.
template <int kChunks, int kStages, int kMinBlocks>
__global__ void __launch_bounds__(kMaxThreads + 32, kMinBlocks) gemv_bulk_kernel(const Params p) {
  constexpr int kRows = Tile<kChunks>::kRows;
  __shared__ float partial[2][kMaxWarps * kRows];
  __shared__ alignas(8) uint64_t full[kStages];
  __shared__ alignas(8) uint64_t empty[kStages];
  extern __shared__ uint4 stages[];

  const int64_t first = first_item(p, blockIdx.x);
  const int64_t last = first_item(p, blockIdx.x + 1);
  if (first >= last) return;  // the same for the whole block

  const int decoders = static_cast<int>(blockDim.x >> 5) - 1;
  const Team team = make_team(p, kRows, decoders);
  const uint32_t sweep = uint32_t(p.k_warps) * 32 * kChunks;  // chunks a row slot
  const uint32_t a_slot = sweep * kChunkBytes;
  const uint32_t s_slot = sweep * 2;
  const uint32_t scales_at = team.rows_per_tile * a_slot;  // within a stage
  const uint32_t stage_bytes = team.rows_per_tile * (a_slot + s_slot);
  const uint32_t ring = shared_address(stages);
  const uint32_t full_at = shared_address(full);
  const uint32_t empty_at = shared_address(empty);

  if (threadIdx.x == 0) {
    for (int s = 0; s < kStages; ++s) {
      mbarrier_init(full_at + 8 * s, 1);
      mbarrier_init(empty_at + 8 * s, decoders);
    }
    mbarrier_init_fence();
  }
  __syncthreads();

  Cursor at{first / p.tiles_per_batch, static_cast<uint32_t>(first % p.tiles_per_batch)};
  if (team.warp == decoders) {  // the producer
    const uint64_t policy = evict_first_policy();
    const uint32_t a_bytes = p.chunks * kChunkBytes;
    const uint32_t s_bytes = p.chunks * 2;
    uint32_t stage = 0, parity = 0;
#pragma unroll 1
    for (int64_t item = first; item < last; ++item) {
      mbarrier_wait(empty_at + 8 * stage, parity ^ 1);
      const uint32_t row0 = at.tile * team.rows_per_tile;
      const uint32_t rows = min(team.rows_per_tile, p.m - row0);
      const uint32_t full_barrier = full_at + 8 * stage;
      if (team.lane == 0) mbarrier_expect_bytes(full_barrier, rows * (a_bytes + s_bytes));
      __syncwarp();
      const uint8_t* a_rows = p.a + at.batch * p.a_batch + static_cast<uint64_t>(row0) * p.a_row;
      const uint8_t* s_batch = p.sfa + at.batch * p.sfa_layout.batch;
      const uint32_t base = ring + stage * stage_bytes;
      for (uint32_t r = team.lane; r < rows; r += 32) {
        bulk_copy(base + r * a_slot, a_rows + static_cast<uint64_t>(r) * p.a_row, a_bytes, full_barrier, policy);
        bulk_copy(base + scales_at + r * s_slot, s_batch + p.sfa_layout.row(row0 + r), s_bytes, full_barrier,
                  policy);
      }
      at = advance(p, at);
      if (++stage == kStages) {
        stage = 0;
        parity ^= 1;
      }
    }
    return;
  }

  const uint32_t zero = opaque_zero(p.m);
  const uint32_t positive = kPositiveLow + zero;
  const uint32_t negative = kNegativeLow + zero;
  Lane<kChunks> lane;
  lane.set(p, 0, team.k_warp, team.lane);
  Vector<kChunks> vector;
  int64_t vector_batch = at.batch;
  load_vector(p, lane, vector_batch, positive, negative, vector);

  const uint8_t* ring_bytes = reinterpret_cast<const uint8_t*>(stages);
  uint32_t stage = 0, parity = 0;
  int reducer = 0;
#pragma unroll 1
  for (int64_t item = first; item < last; ++item) {
    mbarrier_wait(full_at + 8 * stage, parity);
    const uint8_t* base = ring_bytes + stage * stage_bytes;
    Tile<kChunks> tile;
#pragma unroll
    for (int r = 0; r < kRows; ++r) {
      const uint32_t slot = team.group * kRows + r;
#pragma unroll
      for (int i = 0; i < kChunks; ++i) {
        const uint4 a = *reinterpret_cast<const uint4*>(base + slot * a_slot + lane.a_offset[i]);
        const uint32_t pair =
            *reinterpret_cast<const uint16_t*>(base + scales_at + slot * s_slot + lane.a_offset[i] / 8);
        tile.a[r][i] = lane.valid[i] ? a : make_uint4(0, 0, 0, 0);
        tile.s[r][i] = lane.valid[i] ? pair : 0u;
      }
    }
    __syncwarp();
    if (team.lane == 0) mbarrier_arrive(empty_at + 8 * stage);
    if (at.batch != vector_batch) {
      vector_batch = at.batch;
      load_vector(p, lane, vector_batch, positive, negative, vector);
    }
    float acc[kRows] = {};
    accumulate(tile, vector, positive, negative, acc);
    finish_tile<kRows>(p, team, partial, at, item, reducer, acc);
    reducer = next_reducer(team, reducer);
    at = advance(p, at);
    if (++stage == kStages) {
      stage = 0;
      parity ^= 1;
    }
  }
}

}  // namespace nvfp4_gemv
