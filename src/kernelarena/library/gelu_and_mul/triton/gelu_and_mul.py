"""gelu_and_mul and gelu_tanh_and_mul in Triton: out[r, :] = gelu(x[r, :d]) * x[r, d:].

One kernel for both GELUs (FlashInfer's names: ``run`` is exact, ``run_tanh`` the approximation),
with the layout of scale's kernel (library/scale/triton/scale.py) reading the gate and up halves.
- tanh GELU: 0.5 g (1 + tanh(z)) = g * sigmoid(2 z) = g / (1 + 2^(-2 z log2 e)), z = sqrt(2/pi)
  (g + 0.044715 g^3): one ex2.approx and one div.full.f32 like SiLU, about 3e-6 relative error,
  and exact limits: where the exponential overflows (g < -10) the quotient is g / inf = -0.
- exact GELU: g Phi(g), Phi the normal CDF, taken from erfc without branches (_normal_cdf): for
  z = |g| / sqrt 2, erfc(z) = t 2^(P(t) - z^2 log2 e) with t = 1 / (1 + z / 2) and P a degree-9
  polynomial fitted here (the form of Numerical Recipes' erfcc; relative error of erfc under 1.1e-7
  for every z >= 0 in exact arithmetic), and Phi = erfc / 2 for g < 0, 1 - erfc / 2 otherwise.
  In float32 arithmetic (ex2.approx, div.full): Phi within 2.3e-7 absolute everywhere, 1.2e-6
  relative for g > -3 and 8e-6 down to g = -9 (the float32 reference's 0.5 (1 + erf) is off by
  up to 22% relative between g = -5 and -3; all far inside every tolerance). It replaces
  libdevice's erff, whose two polynomial branches diverge within a warp: with bf16 data an
  exact-GELU kernel issues about as many instructions as the memory system moves bytes, and at
  32768x8192 the erff kernels (ours, Inductor's) reached 87% of the copy bandwidth on an H200.
  One ex2, one division and ten FMAs an element now.
- 16-byte vectors when d and the row strides are multiples of 16 elements; int64 row offsets.
- The tile is tuned on the device as scale's is (the same 6 candidates, picks kept in Triton's
  cache folder); plain loads by default.
  Calls under TUNE_MIN_ELEMENTS outputs and the interpreter take the fixed plan.
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
# Kernels may read only constexpr globals.
_TWO_Z_LINEAR = tl.constexpr(2 * 0.7978845608028654 * 1.4426950408889634)  # 2 sqrt(2/pi) log2 e
_TWO_Z_CUBIC = tl.constexpr(2 * 0.7978845608028654 * 0.044715 * 1.4426950408889634)
_SQRT_HALF = tl.constexpr(0.7071067811865476)
_LOG2E = tl.constexpr(1.4426950408889634)
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


@triton.jit
def _normal_cdf(g):
    """Phi(g) = erfc(-g / sqrt 2) / 2 in float32, branch-free (see the module docstring)."""
    z = tl.abs(g) * _SQRT_HALF
    t = 1.0 / (1.0 + 0.5 * z)
    # P(t) = log2(erfc(z) / t) + z^2 log2 e, Horner from the degree-9 coefficient.
    p = 0.24346851 * t - 1.1733749
    p = p * t + 2.1254525
    p = p * t - 1.6174033
    p = p * t + 0.39147764
    p = p * t - 0.26540717
    p = p * t + 0.13905863
    p = p * t + 0.5397484
    p = p * t + 1.4427277
    p = p * t - 1.8257482
    half_erfc = 0.5 * t * tl.exp2(p - z * z * _LOG2E)  # underflows to 0 past |g| of about 14
    return tl.where(g < 0.0, half_erfc, 1.0 - half_erfc)


# rows only bounds the mask: specializing on it (== 1, divisible by 16) would only add compiles.
@triton.jit(do_not_specialize=["rows", "tune_tag"])
def _gelu_and_mul_kernel(
    x_ptr,
    out_ptr,
    rows,
    d,
    x_row_stride,
    out_row_stride,
    tune_tag,  # never read: names the tuner in its tuning key (see _tune_tag)
    TANH: tl.constexpr,
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
    if TANH:
        two_z_log2e = gate * (_TWO_Z_LINEAR + _TWO_Z_CUBIC * gate * gate)
        gelu = gate / (1.0 + tl.exp2(-two_z_log2e))
    else:
        gelu = gate * _normal_cdf(gate)
    out = gelu * up.to(tl.float32)
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
        # Its tuning key adds the exact width, the GELU, the tuner's tag and the dtypes.
        configs = tuning_configs(rows_bucket, d_block)
        bench = _bench_warm if warm else _bench_cold
        tuner = _TUNERS[key] = triton.autotune(
            configs=configs, key=["d", "TANH", "tune_tag"], do_bench=bench, cache_results=True
        )(_gelu_and_mul_kernel)
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


def _launch(x: torch.Tensor, out: torch.Tensor, tanh: bool, config: triton.Config | None) -> None:
    """``config``: that plan, untuned; None: the tuned plan (or the fixed one for small calls)."""
    name = "gelu_tanh_and_mul" if tanh else "gelu_and_mul"
    if x.ndim != 2 or out.ndim != 2 or x.shape[1] != 2 * out.shape[1] or x.shape[0] != out.shape[0]:
        raise ValueError(
            f"{name}: x {tuple(x.shape)} must be [rows, 2 d], out {tuple(out.shape)} [rows, d]"
        )
    if out.dtype != x.dtype:
        raise ValueError(f"{name}: out is {out.dtype}, x is {x.dtype}")
    rows, d = out.shape
    if rows == 0 or d == 0:
        return
    if x.stride(1) != 1 or out.stride(1) != 1:
        raise ValueError(f"{name}: the last dimension of x and out must be contiguous")
    args = (x, out, rows, d, x.stride(0), out.stride(0))
    small = not _tunes(x) or rows * d < TUNE_MIN_ELEMENTS
    if config is None and small:
        config = _fixed_config(rows, d, x.device)
    if config is not None:
        meta = config.kwargs
        grid = (triton.cdiv(rows, meta["BLOCK_ROWS"]), triton.cdiv(d, meta["BLOCK_D"]))
        _gelu_and_mul_kernel[grid](*args, tune_tag=0, TANH=tanh, **config.all_kwargs())
        return
    warm = 3 * rows * d * x.element_size() < WARM_TUNE_MAX_BYTES
    key = (triton.next_power_of_2(d), _rows_bucket(rows), warm)
    grid = lambda m: (triton.cdiv(rows, m["BLOCK_ROWS"]), triton.cdiv(d, m["BLOCK_D"]))  # noqa: E731
    _tuner(*key)[grid](*args, tune_tag=_tune_tag(x.device, *key), TANH=tanh)


def run(x: torch.Tensor, out: torch.Tensor) -> None:
    """gelu_and_mul: exact GELU."""
    _launch(x, out, False, None)


def run_tanh(x: torch.Tensor, out: torch.Tensor) -> None:
    """gelu_tanh_and_mul: GELU in its tanh approximation."""
    _launch(x, out, True, None)


def run_with_config(x: torch.Tensor, out: torch.Tensor, tanh: bool, config: triton.Config) -> None:
    """One candidate plan, untuned (tests run every candidate)."""
    _launch(x, out, tanh, config)
