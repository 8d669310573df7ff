"""scale in Triton: out = x * factor, computed in float32 and rounded once.

The operator is memory-bound, so the kernel's job is to keep HBM busy:
- Each program owns a [BLOCK_ROWS, BLOCK_COLS] tile. With 16-byte alignment (Triton specializes
  pointers and strides divisible by 16), every thread moves 16-byte vectors.
- The tile (elements and warps per program) is tuned on the device (triton.autotune) the first time
  a (width, row-count bucket, dtype) is seen, over 6 candidates of 8 and 16 elements a thread:
  Inductor's pointwise plan (1024 elements, 4 warps: one 16-byte vector of bf16 a thread), Liger's
  (a row of 2048 at 8 warps), and the previous fixed plan (4096 elements, 8 warps, evict-first
  loads) among them. Plain loads are the default: on an H200 every kernel here that streamed its
  input with evict-first (this one, and the CUDA one with ld.global.cs) reached 87-91% of the copy
  bandwidth at 32768x8192 where torch's plain-load kernel reached 99%. Timing is Triton's: CUDA
  events with L2 flushed for large calls, CUDA graphs with the data in L2 under
  WARM_TUNE_MAX_BYTES (as the kernel sees an activation the previous kernel just wrote). The
  picks are kept in Triton's cache folder (cache_results) under a tag per tuner (_tune_tag: row
  bucket, timing mode, GPU model), so a later process reads them instead of timing again. Calls
  under TUNE_MIN_ELEMENTS and the interpreter take a fixed plan, which shrinks tiles until every SM
  gets two programs.
- out is the next kernel's input, so stores keep the default policy and may stay in the 50-60 MB
  L2 when they fit.
- Row offsets are int64: a million rows of 16K elements is 2^34 elements.
"""

import functools
import os
import zlib

import torch
import triton
import triton.language as tl
import triton.testing

_TILE = 4096  # fixed plan: elements per program at large sizes
_MIN_TILE = 512  # fixed plan: smallest tile when shrinking for small shapes
# (elements per program, warps, evict-first loads): the tuning candidates.
_TUNED_TILES = (
    (512, 2, False),
    (1024, 4, False),
    (2048, 8, False),
    (2048, 4, False),
    (4096, 8, False),
    (4096, 8, True),
)
TUNE_MIN_ELEMENTS = (
    1 << 18
)  # smaller calls take the fixed plan (tuning would cost more than it wins)
WARM_TUNE_MAX_BYTES = 16 << 20  # under this a call's data stays in the 50-60 MB L2
ROWS_BUCKET_MAX = 1 << 16  # row counts are tuned per power of two up to this
INTERPRETED = os.environ.get("TRITON_INTERPRET") == "1"


# rows only bounds the mask: specializing on it (== 1, divisible by 16) would only add compiles.
@triton.jit(do_not_specialize=["rows", "tune_tag"])
def _scale_kernel(
    x_ptr,
    out_ptr,
    factor,
    rows,
    cols,
    x_row_stride,
    out_row_stride,
    tune_tag,  # never read: names the tuner in its tuning key (see _tune_tag)
    BLOCK_ROWS: tl.constexpr,
    BLOCK_COLS: tl.constexpr,
    EVICT_FIRST: tl.constexpr,
):
    row = tl.program_id(0).to(tl.int64) * BLOCK_ROWS + tl.arange(0, BLOCK_ROWS).to(tl.int64)
    col = tl.program_id(1) * BLOCK_COLS + tl.arange(0, BLOCK_COLS)
    mask = (row[:, None] < rows) & (col[None, :] < cols)
    x_ptrs = x_ptr + row[:, None] * x_row_stride + col[None, :]
    if EVICT_FIRST:
        x = tl.load(x_ptrs, mask=mask, eviction_policy="evict_first")
    else:
        x = tl.load(x_ptrs, mask=mask)
    y = x.to(tl.float32) * factor
    out_offsets = row[:, None] * out_row_stride + col[None, :]
    tl.store(out_ptr + out_offsets, y.to(out_ptr.dtype.element_ty), mask=mask)


# -- launch plans ----------------------------------------------------------------------------------


@functools.lru_cache(maxsize=16)
def _multiprocessors(device_index: int) -> int:
    return torch.cuda.get_device_properties(device_index).multi_processor_count


def _config(block_rows: int, block_cols: int, num_warps: int, evict_first: bool) -> triton.Config:
    kwargs = {"BLOCK_ROWS": block_rows, "BLOCK_COLS": block_cols, "EVICT_FIRST": evict_first}
    return triton.Config(kwargs, num_warps=num_warps, num_stages=1)


def _fixed_config(rows: int, cols: int, device: torch.device) -> triton.Config:
    block_cols = min(triton.next_power_of_2(cols), _TILE)
    block_rows = min(_TILE // block_cols, triton.next_power_of_2(rows))
    # Two programs per SM at least; under the interpreter (CPU) fewer programs run faster.
    wanted = 2 * _multiprocessors(device.index or 0) if device.type == "cuda" else 1
    while (
        block_rows * block_cols > _MIN_TILE
        and triton.cdiv(rows, block_rows) * triton.cdiv(cols, block_cols) < wanted
    ):
        if block_rows > 1:
            block_rows //= 2
        else:
            block_cols //= 2
    # 8 elements a thread (one 16-byte vector of bf16), 8 warps at most: 16 at full tiles.
    num_warps = max(1, min(8, block_rows * block_cols // 256))
    return _config(block_rows, block_cols, num_warps, False)


def tuning_configs(rows: int, cols: int) -> list[triton.Config]:
    """The candidates tuned for a [rows, cols] call: a tile is BLOCK_ROWS whole rows, or part of
    one row for wide rows; tiles larger than the (bucketed) call are left out."""
    cols_block = triton.next_power_of_2(cols)
    configs = []
    for tile, warps, evict_first in _TUNED_TILES:
        block_cols = min(tile, cols_block)
        block_rows = tile // block_cols
        if block_rows <= _rows_bucket(rows):
            configs.append(_config(block_rows, block_cols, warps, evict_first))
    return configs or [_config(1, min(cols_block, _TILE), 4, False)]


def _rows_bucket(rows: int) -> int:
    return min(triton.next_power_of_2(max(rows, 1)), ROWS_BUCKET_MAX)


def _tunes(x: torch.Tensor) -> bool:
    """Tuning times kernels on the GPU: never under the interpreter."""
    return not INTERPRETED and x.device.type == "cuda"


def _bench_cold(kernel_call, quantiles):
    return triton.testing.do_bench(kernel_call, warmup=5, rep=25, quantiles=quantiles)


def _bench_warm(kernel_call, quantiles):
    return triton.testing.do_bench_cudagraph(kernel_call, rep=10, quantiles=quantiles)


# One autotuner per (width bucket, row bucket, ...): each caches its pick per tuning key.
_TUNERS: dict[tuple, triton.runtime.Autotuner] = {}


def _tuner(cols_block: int, rows_bucket: int, warm: bool):
    key = (cols_block, rows_bucket, warm)
    tuner = _TUNERS.get(key)
    if tuner is None:
        # Its tuning key adds the exact width, the tuner's tag and the dtypes.
        configs = tuning_configs(rows_bucket, cols_block)
        bench = _bench_warm if warm else _bench_cold
        tuner = _TUNERS[key] = triton.autotune(
            configs=configs, key=["cols", "tune_tag"], do_bench=bench, cache_results=True
        )(_scale_kernel)
    return tuner


@functools.lru_cache(maxsize=256)
def _tune_tag(device: torch.device, *tuner: object) -> int:
    """The kernel's ``tune_tag``: a 31-bit CRC of the GPU's name and the tuner's key. Picks are
    cached on disk (cache_results) under Triton's tuning key, which is otherwise only the width and
    the dtypes: the same for every row bucket, for cold and warm timing, and for two GPUs of one
    architecture (an H100 and an H200 are both sm_90a) sharing a cache folder. Always an int32, so
    every tag runs the same compiled kernel."""
    name = torch.cuda.get_device_name(device) if device.type == "cuda" else device.type
    return zlib.crc32(repr((name, *tuner)).encode()) & 0x7FFFFFFF


def tuned_plans() -> dict[str, str]:
    """The plans picked on this device so far, by (buckets, tuning key): for reports."""
    return {f"{k} {key}": str(c) for k, t in _TUNERS.items() for key, c in t.cache.items()}


def _launch(x, factor, out, config: triton.Config | None) -> None:
    """``config``: that plan, untuned; None: the tuned plan (or the fixed one for small calls)."""
    if x.ndim != 2 or out.shape != x.shape or out.dtype != x.dtype:
        raise ValueError(
            f"scale: x {tuple(x.shape)} {x.dtype} and out {tuple(out.shape)} {out.dtype}"
        )
    if x.stride(1) != 1 or out.stride(1) != 1:
        raise ValueError("scale: the last dimension of x and out must be contiguous")
    rows, cols = x.shape
    if rows == 0 or cols == 0:
        return
    args = (x, out, float(factor), rows, cols, x.stride(0), out.stride(0))
    small = not _tunes(x) or rows * cols < TUNE_MIN_ELEMENTS
    if config is None and small:
        config = _fixed_config(rows, cols, x.device)
    if config is not None:
        meta = config.kwargs
        grid = (triton.cdiv(rows, meta["BLOCK_ROWS"]), triton.cdiv(cols, meta["BLOCK_COLS"]))
        _scale_kernel[grid](*args, tune_tag=0, **config.all_kwargs())
        return
    warm = 2 * rows * cols * x.element_size() < WARM_TUNE_MAX_BYTES
    key = (triton.next_power_of_2(cols), _rows_bucket(rows), warm)
    grid = lambda m: (triton.cdiv(rows, m["BLOCK_ROWS"]), triton.cdiv(cols, m["BLOCK_COLS"]))  # noqa: E731
    _tuner(*key)[grid](*args, tune_tag=_tune_tag(x.device, *key))


def run(x: torch.Tensor, factor: float, out: torch.Tensor) -> None:
    _launch(x, factor, out, None)


def run_with_config(x: torch.Tensor, factor: float, out: torch.Tensor, config) -> None:
    """One candidate plan, untuned (tests run every candidate)."""
    _launch(x, factor, out, config)
