"""silu_and_mul in Triton: out[r, :] = silu(x[r, :d]) * x[r, d:], in float32, rounded once.

The layout of scale's kernel (library/scale/triton/scale.py), read twice per tile: the gate half
and the up half of each row, d elements apart.
- silu(g) = g * sigmoid(g) = g / (1 + 2^(-g log2 e)): tl.exp2 is ex2.approx.f32 and fp32 division
  is div.full.f32 (2 ulp), about 2e-6 relative error in all; where 2^(-g log2 e) overflows
  (g < -88) the quotient is g / inf = -0, the limit.
- 16-byte vectors when d and the row strides are multiples of 16 elements (Triton specializes
  arguments divisible by 16); int64 row offsets.
- The tile is tuned on the device as scale's is (the same 6 candidates, Inductor's 1024 elements
  at 4 warps and Liger's row of 2048 at 8 among them; picks kept in Triton's cache folder). Plain loads by default: with evict-first
  loads this kernel trailed the plain-load peers by 8% at 32768x8192 on an H200; the previous
  fixed plan, evict-first, stays a candidate. Calls under TUNE_MIN_ELEMENTS outputs (128x4096
  inputs are exactly at it) and the interpreter take the fixed plan, which shrinks tiles until
  every SM gets two programs.
"""

import functools
import os
import zlib

import torch
import triton
import triton.language as tl
import triton.testing

_TILE = 4096  # fixed plan: output elements per program at large sizes
_MIN_TILE = 512
_LOG2E = tl.constexpr(1.4426950408889634)  # kernels may read only constexpr globals
# (output elements per program, warps, evict-first loads): the tuning candidates.
_TUNED_TILES = (
    (512, 2, False),
    (1024, 4, False),
    (2048, 8, False),
    (2048, 4, False),
    (4096, 8, False),
    (4096, 8, True),
)
TUNE_MIN_ELEMENTS = 1 << 18  # outputs; smaller calls take the fixed plan
WARM_TUNE_MAX_BYTES = 16 << 20  # under this a call's data stays in the 50-60 MB L2
ROWS_BUCKET_MAX = 1 << 16  # row counts are tuned per power of two up to this
INTERPRETED = os.environ.get("TRITON_INTERPRET") == "1"


# rows only bounds the mask: specializing on it (== 1, divisible by 16) would only add compiles.
@triton.jit(do_not_specialize=["rows", "tune_tag"])
def _silu_and_mul_kernel(
    x_ptr,
    out_ptr,
    rows,
    d,
    x_row_stride,
    out_row_stride,
    tune_tag,  # never read: names the tuner in its tuning key (see _tune_tag)
    BLOCK_ROWS: tl.constexpr,
    BLOCK_D: tl.constexpr,
    EVICT_FIRST: tl.constexpr,
):
    row = tl.program_id(0).to(tl.int64) * BLOCK_ROWS + tl.arange(0, BLOCK_ROWS).to(tl.int64)
    col = tl.program_id(1) * BLOCK_D + tl.arange(0, BLOCK_D)
    mask = (row[:, None] < rows) & (col[None, :] < d)
    gate_ptr = x_ptr + row[:, None] * x_row_stride + col[None, :]
    if EVICT_FIRST:
        gate = tl.load(gate_ptr, mask=mask, other=0.0, eviction_policy="evict_first")
        up = tl.load(gate_ptr + d, mask=mask, other=0.0, eviction_policy="evict_first")
    else:
        gate = tl.load(gate_ptr, mask=mask, other=0.0)
        up = tl.load(gate_ptr + d, mask=mask, other=0.0)
    gate = gate.to(tl.float32)
    silu = gate / (1.0 + tl.exp2(gate * -_LOG2E))
    out = silu * up.to(tl.float32)
    out_offsets = row[:, None] * out_row_stride + col[None, :]
    tl.store(out_ptr + out_offsets, out.to(out_ptr.dtype.element_ty), mask=mask)


# -- launch plans ----------------------------------------------------------------------------------


@functools.lru_cache(maxsize=16)
def _multiprocessors(device_index: int) -> int:
    return torch.cuda.get_device_properties(device_index).multi_processor_count


def _config(block_rows: int, block_d: int, num_warps: int, evict_first: bool) -> triton.Config:
    kwargs = {"BLOCK_ROWS": block_rows, "BLOCK_D": block_d, "EVICT_FIRST": evict_first}
    return triton.Config(kwargs, num_warps=num_warps, num_stages=1)


def _fixed_config(rows: int, cols: int, device: torch.device) -> triton.Config:
    """The untuned plan for ``rows`` rows of ``cols`` outputs."""
    block_cols = min(triton.next_power_of_2(cols), _TILE)
    block_rows = min(_TILE // block_cols, triton.next_power_of_2(rows))
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


def tuning_configs(rows: int, d: int) -> list[triton.Config]:
    """The candidates tuned for ``rows`` rows of ``d`` outputs: a tile is BLOCK_ROWS whole rows, or
    part of one row for wide rows; tiles larger than the (bucketed) call are left out."""
    d_block = triton.next_power_of_2(d)
    configs = []
    for tile, warps, evict_first in _TUNED_TILES:
        block_d = min(tile, d_block)
        block_rows = tile // block_d
        if block_rows <= _rows_bucket(rows):
            configs.append(_config(block_rows, block_d, warps, evict_first))
    return configs or [_config(1, min(d_block, _TILE), 4, False)]


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


def _tuner(d_block: int, rows_bucket: int, warm: bool):
    key = (d_block, rows_bucket, warm)
    tuner = _TUNERS.get(key)
    if tuner is None:
        # Its tuning key adds the exact width, the tuner's tag and the dtypes.
        configs = tuning_configs(rows_bucket, d_block)
        bench = _bench_warm if warm else _bench_cold
        tuner = _TUNERS[key] = triton.autotune(
            configs=configs, key=["d", "tune_tag"], do_bench=bench, cache_results=True
        )(_silu_and_mul_kernel)
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


def _launch(x: torch.Tensor, out: torch.Tensor, config: triton.Config | None) -> None:
    """``config``: that plan, untuned; None: the tuned plan (or the fixed one for small calls)."""
    if x.ndim != 2 or out.ndim != 2 or x.shape[1] != 2 * out.shape[1] or x.shape[0] != out.shape[0]:
        raise ValueError(
            f"silu_and_mul: x {tuple(x.shape)} must be [rows, 2 d] "
            f"and out {tuple(out.shape)} [rows, d]"
        )
    if out.dtype != x.dtype:
        raise ValueError(f"silu_and_mul: out is {out.dtype}, x is {x.dtype}")
    rows, d = out.shape
    if rows == 0 or d == 0:
        return
    if x.stride(1) != 1 or out.stride(1) != 1:
        raise ValueError("silu_and_mul: the last dimension of x and out must be contiguous")
    args = (x, out, rows, d, x.stride(0), out.stride(0))
    small = not _tunes(x) or rows * d < TUNE_MIN_ELEMENTS
    if config is None and small:
        config = _fixed_config(rows, d, x.device)
    if config is not None:
        meta = config.kwargs
        grid = (triton.cdiv(rows, meta["BLOCK_ROWS"]), triton.cdiv(d, meta["BLOCK_D"]))
        _silu_and_mul_kernel[grid](*args, tune_tag=0, **config.all_kwargs())
        return
    warm = 3 * rows * d * x.element_size() < WARM_TUNE_MAX_BYTES
    key = (triton.next_power_of_2(d), _rows_bucket(rows), warm)
    grid = lambda m: (triton.cdiv(rows, m["BLOCK_ROWS"]), triton.cdiv(d, m["BLOCK_D"]))  # noqa: E731
    _tuner(*key)[grid](*args, tune_tag=_tune_tag(x.device, *key))


def run(x: torch.Tensor, out: torch.Tensor) -> None:
    _launch(x, out, None)


def run_with_config(x: torch.Tensor, out: torch.Tensor, config: triton.Config) -> None:
    """One candidate plan, untuned (tests run every candidate)."""
    _launch(x, out, config)
