"""layernorm in Triton: out = (x - mean) * rsqrt(var + eps) * weight + bias, float32 math, one rounding.

Up to MAX_ROW_BLOCK columns a program holds BLOCK_ROWS whole rows in registers, so x is read once
and out written once (the bandwidth floor), and the variance is the exact two-pass one, taken from
x - mean in registers. Wider rows take two passes over x; their variance comes from sums of x - x[0]
and its square (shifted by the row's first value, so a mean large against the spread does not
cancel).

The launch plan is tuned on the device (triton.autotune) the first time a (width, row-count
bucket, dtype) is seen, over at most 7 candidates: warps per program (8 to 64 values a thread) and
whether weight and bias are loaded before the two reductions (their L2 latency hides under x's: the
only choice when a program or two per SM is all there is) or after them (fewer live registers, so
more programs per SM). Registers decided the large shape: the previous fixed plan for 8192-wide
rows (16 warps, weight and bias first, column masks) took 51 registers a thread (ptxas, sm_90a,
bf16), so two programs of 16 KB per SM, and reached 72% of the copy bandwidth on an H200, against
97% for Inductor's 8 warps; at 8 warps with the loads late and EVEN_N (a power-of-two width, no
column masks) it takes 63 registers, four programs per SM. Timing is Triton's: CUDA events with
L2 flushed for large calls, CUDA graphs with the data in L2 for calls under WARM_TUNE_MAX_BYTES.
The picks are kept in Triton's cache folder (cache_results) under a tag per tuner (_tune_tag: row
bucket, timing mode, GPU model), so a later process reads them instead of timing again. Calls under
TUNE_MIN_ELEMENTS and the interpreter take the fixed plan.
"""

import functools
import os
import zlib

import torch
import triton
import triton.language as tl
import triton.testing

MAX_ROW_BLOCK = 32768  # 64 KB of bfloat16 per row: 32 values per thread at 32 warps
WIDE_CHUNK = 8192
TILE_ELEMENTS = 2048  # fixed plan: rows per program so a program covers at least this much
ELEMENTS_PER_THREAD = 16  # fixed plan: two 16-byte vectors of 16-bit values per thread
TUNE_TILE = 4096  # tuned plans: elements per program (rows per program for narrow rows)
TUNE_MIN_ELEMENTS = (
    1 << 18
)  # smaller calls take the fixed plan (tuning would cost more than it wins)
WARM_TUNE_MAX_BYTES = 16 << 20  # under this a call's data stays in the 50-60 MB L2
ROWS_BUCKET_MAX = 1 << 16  # row counts are tuned per power of two up to this
INTERPRETED = os.environ.get("TRITON_INTERPRET") == "1"


@triton.jit
def _to_storage(value, dtype: tl.constexpr, SOFTWARE_BF16: tl.constexpr):
    """float32 to the storage dtype, rounded to nearest even. Triton's interpreter (3.6, 3.7)
    truncates float32 -> bfloat16 casts, so under it bfloat16 is rounded here with integer ops;
    compiled, the conversion instruction rounds."""
    if SOFTWARE_BF16 and dtype == tl.bfloat16:  # resolved at compile time
        bits = value.to(tl.uint32, bitcast=True)
        bits = bits + 0x7FFF + ((bits >> 16) & 1)
        result = (bits >> 16).to(tl.uint16).to(tl.bfloat16, bitcast=True)
    else:
        result = value.to(dtype)
    return result


@triton.jit(do_not_specialize=["rows", "tune_tag"])
def _layernorm_rows(
    x_ptr,
    w_ptr,
    b_ptr,
    out_ptr,
    rows,
    hidden,
    x_row_stride,
    out_row_stride,
    eps,
    tune_tag,  # never read: names the tuner in its tuning key (see _tune_tag)
    BLOCK_ROWS: tl.constexpr,
    BLOCK_N: tl.constexpr,
    EVEN_N: tl.constexpr,
    LATE_PARAMS: tl.constexpr,
    SOFTWARE_BF16: tl.constexpr,
):
    row = tl.program_id(0) * BLOCK_ROWS + tl.arange(0, BLOCK_ROWS)
    col = tl.arange(0, BLOCK_N)
    if EVEN_N:  # noqa: SIM108 (a static branch: Triton resolves it at compile time)
        col_in = col < BLOCK_N  # always true: folded away
    else:
        col_in = col < hidden
    mask = (row < rows)[:, None] & col_in[None, :]
    row64 = row.to(tl.int64)[:, None]
    x = tl.load(x_ptr + row64 * x_row_stride + col[None, :], mask=mask, other=0.0)
    if not LATE_PARAMS:
        w = tl.load(w_ptr + col, mask=col_in, other=0.0, eviction_policy="evict_last")
        b = tl.load(b_ptr + col, mask=col_in, other=0.0, eviction_policy="evict_last")
    x = x.to(tl.float32)
    mean = tl.sum(x, axis=1) / hidden
    if EVEN_N:  # noqa: SIM108
        centered = x - mean[:, None]
    else:
        centered = tl.where(col_in[None, :], x - mean[:, None], 0.0)
    rstd = tl.rsqrt(tl.sum(centered * centered, axis=1) / hidden + eps)
    if LATE_PARAMS:
        w = tl.load(w_ptr + col, mask=col_in, other=0.0, eviction_policy="evict_last")
        b = tl.load(b_ptr + col, mask=col_in, other=0.0, eviction_policy="evict_last")
    y = centered * rstd[:, None] * w.to(tl.float32)[None, :] + b.to(tl.float32)[None, :]
    tl.store(
        out_ptr + row64 * out_row_stride + col[None, :],
        _to_storage(y, out_ptr.dtype.element_ty, SOFTWARE_BF16),
        mask=mask,
    )


@triton.jit(do_not_specialize=["rows"])
def _layernorm_wide(
    x_ptr,
    w_ptr,
    b_ptr,
    out_ptr,
    rows,
    hidden,
    x_row_stride,
    out_row_stride,
    eps,
    CHUNK: tl.constexpr,
    SOFTWARE_BF16: tl.constexpr,
):
    row = tl.program_id(0).to(tl.int64)
    x_row = x_ptr + row * x_row_stride
    out_row = out_ptr + row * out_row_stride
    shift = tl.load(x_row).to(tl.float32)
    partial = tl.zeros([CHUNK], dtype=tl.float32)
    partial_sq = tl.zeros([CHUNK], dtype=tl.float32)
    for start in range(0, hidden, CHUNK):
        col = start + tl.arange(0, CHUNK)
        mask = col < hidden
        d = tl.where(mask, tl.load(x_row + col, mask=mask, other=0.0).to(tl.float32) - shift, 0.0)
        partial += d
        partial_sq += d * d
    mean_shifted = tl.sum(partial, axis=0) / hidden
    var = tl.maximum(tl.sum(partial_sq, axis=0) / hidden - mean_shifted * mean_shifted, 0.0)
    mean = shift + mean_shifted
    rstd = tl.rsqrt(var + eps)
    for start in range(0, hidden, CHUNK):
        col = start + tl.arange(0, CHUNK)
        mask = col < hidden
        x = tl.load(x_row + col, mask=mask, other=0.0).to(tl.float32)
        w = tl.load(w_ptr + col, mask=mask, other=0.0).to(tl.float32)
        b = tl.load(b_ptr + col, mask=mask, other=0.0).to(tl.float32)
        tl.store(
            out_row + col,
            _to_storage((x - mean) * rstd * w + b, out_ptr.dtype.element_ty, SOFTWARE_BF16),
            mask=mask,
        )


# -- launch plans ----------------------------------------------------------------------------------


def _fixed_config(block_n: int) -> triton.Config:
    block_rows = max(1, TILE_ELEMENTS // block_n)
    num_warps = min(32, max(4, block_rows * block_n // (32 * ELEMENTS_PER_THREAD)))
    return triton.Config(
        {"BLOCK_ROWS": block_rows, "LATE_PARAMS": False}, num_warps=num_warps, num_stages=1
    )


def tuning_configs(rows: int, hidden: int, multiprocessors: int = 132) -> list[triton.Config]:
    """The candidates tuned for a [rows, hidden] call (rows-per-program bucketed by powers of two)."""
    block_n = triton.next_power_of_2(hidden)
    tile = max(block_n, TUNE_TILE)
    block_rows = min(tile // block_n, _rows_bucket(rows))
    programs = triton.cdiv(_rows_bucket(rows), block_rows)
    # Under two programs per SM the call is one round trip to memory: weight and bias loaded first.
    many = programs >= 2 * multiprocessors
    # 8 to 64 values a thread; 2 to 16 warps (32 for the widest rows: 64 values a thread at most).
    fewest, most = (2, 16) if block_n <= 8192 else (4, 32)
    configs = []
    for per_thread in (8, 16, 32, 64):
        warps = block_rows * block_n // (32 * per_thread)
        if not fewest <= warps <= most:
            continue
        # Loaded first, 64 values a thread take 120-250 registers: late only, given the choice.
        late = ((False, True) if per_thread < 64 else (True,)) if many else (False,)
        configs += [
            triton.Config(
                {"BLOCK_ROWS": block_rows, "LATE_PARAMS": lp}, num_warps=warps, num_stages=1
            )
            for lp in late
        ]
    return configs or [_fixed_config(block_n)]


def _rows_bucket(rows: int) -> int:
    return min(triton.next_power_of_2(max(rows, 1)), ROWS_BUCKET_MAX)


@functools.lru_cache(maxsize=16)
def _multiprocessors(device_index: int) -> int:
    return torch.cuda.get_device_properties(device_index).multi_processor_count


def _tunes(x: torch.Tensor) -> bool:
    """Tuning times kernels on the GPU: never under the interpreter."""
    return not INTERPRETED and x.device.type == "cuda"


def _bench_cold(kernel_call, quantiles):
    return triton.testing.do_bench(kernel_call, warmup=5, rep=25, quantiles=quantiles)


def _bench_warm(kernel_call, quantiles):
    return triton.testing.do_bench_cudagraph(kernel_call, rep=10, quantiles=quantiles)


# One autotuner per (width bucket, row bucket, ...): each caches its pick per tuning key.
_TUNERS: dict[tuple, triton.runtime.Autotuner] = {}


def _tuner(block_n: int, rows_bucket: int, multiprocessors: int, warm: bool):
    key = (block_n, rows_bucket, multiprocessors, warm)
    tuner = _TUNERS.get(key)
    if tuner is None:
        # Its tuning key adds the exact width, the tuner's tag and the dtypes.
        configs = tuning_configs(rows_bucket, block_n, multiprocessors)
        bench = _bench_warm if warm else _bench_cold
        tuner = _TUNERS[key] = triton.autotune(
            configs=configs, key=["hidden", "tune_tag"], do_bench=bench, cache_results=True
        )(_layernorm_rows)
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


def _check(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor, out: torch.Tensor) -> None:
    if (
        x.dim() != 2
        or out.shape != x.shape
        or weight.shape != (x.shape[1],)
        or bias.shape != weight.shape
    ):
        shapes = [tuple(t.shape) for t in (x, weight, bias, out)]
        raise ValueError(f"layernorm: x, weight, bias, out shapes {shapes}")
    if x.shape[1] > 1 and any(t.stride(-1) != 1 for t in (x, weight, bias, out)):
        raise ValueError(
            "layernorm: the last dimension of x, out, weight and bias must be contiguous"
        )


def _launch(x, weight, bias, eps, out, config: triton.Config | None) -> None:
    """``config``: that plan, untuned; None: the tuned plan (or the fixed one for small calls)."""
    _check(x, weight, bias, out)
    rows, hidden = x.shape
    if rows == 0 or hidden == 0:
        return
    block_n = triton.next_power_of_2(hidden)
    args = (x, weight, bias, out, rows, hidden, x.stride(0), out.stride(0), float(eps))
    if block_n > MAX_ROW_BLOCK:
        _layernorm_wide[(rows,)](*args, CHUNK=WIDE_CHUNK, SOFTWARE_BF16=INTERPRETED, num_warps=16)
        return
    meta = {"BLOCK_N": block_n, "EVEN_N": hidden == block_n, "SOFTWARE_BF16": INTERPRETED}
    small = not _tunes(x) or rows * hidden < TUNE_MIN_ELEMENTS
    if config is None and small:
        config = _fixed_config(block_n)
    if config is not None:
        grid = (triton.cdiv(rows, config.kwargs["BLOCK_ROWS"]),)
        _layernorm_rows[grid](*args, tune_tag=0, **meta, **config.all_kwargs())
        return
    warm = 2 * rows * hidden * x.element_size() < WARM_TUNE_MAX_BYTES
    key = (block_n, _rows_bucket(rows), _multiprocessors(x.device.index or 0), warm)
    tag = _tune_tag(x.device, *key)
    _tuner(*key)[lambda m: (triton.cdiv(rows, m["BLOCK_ROWS"]),)](*args, tune_tag=tag, **meta)


def run(
    x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor, eps: float, out: torch.Tensor
) -> None:
    _launch(x, weight, bias, eps, out, None)


def run_with_config(x, weight, bias, eps, out, config: triton.Config) -> None:
    """One candidate plan, untuned (tests run every candidate)."""
    _launch(x, weight, bias, eps, out, config)
