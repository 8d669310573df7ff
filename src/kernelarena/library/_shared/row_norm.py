"""The launch plans of the Triton row norms (rmsnorm, layernorm, fused_add_rmsnorm): one template,
the kernels apart.

A norm brings two kernels: ``rows`` holds BLOCK_ROWS whole rows of up to MAX_ROW_BLOCK columns in
registers (x read once, outputs written once: the bandwidth floor) and takes the constexprs
BLOCK_ROWS, BLOCK_N, EVEN_N (a power-of-two width: no column masks), LATE_PARAMS and SOFTWARE_BF16
and a ``tune_tag``; ``wide`` takes one row a program in CHUNK-column steps, two passes over it.

The plan of ``rows`` is tuned on the device (tuning.py) the first time a (width, row-count bucket,
dtype) is seen, over at most 7 candidates: warps per program (8 to 64 values a thread) and whether
the per-column parameters (weight, bias) are loaded before the reduction (their L2 latency hides
under x's: the only choice when a program or two per SM is all there is) or after it (fewer live
registers, so more programs per SM; ptxas, sm_90a, bf16, 8192 wide, 8 warps: rmsnorm takes 63
registers early, 53 late). Calls under TUNE_MIN_ELEMENTS and the interpreter take the fixed plan,
which costs no tuning.
"""

import triton
import triton.language as tl

from . import tuning

MAX_ROW_BLOCK = 32768  # 64 KB of bfloat16 per row: 32 values per thread at 32 warps
WIDE_CHUNK = 8192
TILE_ELEMENTS = 2048  # fixed plan: rows per program so a program covers at least this much
ELEMENTS_PER_THREAD = 16  # fixed plan: two 16-byte vectors of 16-bit values per thread
TUNE_TILE = 4096  # tuned plans: elements per program (rows per program for narrow rows)
TUNE_MIN_ELEMENTS = (
    1 << 18
)  # smaller calls take the fixed plan (tuning would cost more than it wins)


@triton.jit
def to_storage(value, dtype: tl.constexpr, SOFTWARE_BF16: tl.constexpr):
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


@triton.jit
def row_block(rows, hidden, BLOCK_ROWS: tl.constexpr, BLOCK_N: tl.constexpr, EVEN_N: tl.constexpr):
    """A ``rows`` program's block: its rows (int64, a column, for 64-bit offsets), the columns,
    which columns are in the row (all of them where EVEN_N: the masks fold away) and the mask of
    the elements in range."""
    row = tl.program_id(0) * BLOCK_ROWS + tl.arange(0, BLOCK_ROWS)
    col = tl.arange(0, BLOCK_N)
    if EVEN_N:  # noqa: SIM108 (a static branch: Triton resolves it at compile time)
        col_in = col < BLOCK_N  # always true: folded away
    else:
        col_in = col < hidden
    mask = (row < rows)[:, None] & col_in[None, :]
    return row.to(tl.int64)[:, None], col, col_in, mask


@triton.jit
def load_block(ptr, row64, row_stride, col, mask):
    """The block's elements of a [rows, hidden] tensor, 0 outside it."""
    return tl.load(ptr + row64 * row_stride + col[None, :], mask=mask, other=0.0)


@triton.jit
def load_params(ptr, col, col_in):
    """A per-column parameter (weight, bias): every program reads it, so it stays in L2."""
    return tl.load(ptr + col, mask=col_in, other=0.0, eviction_policy="evict_last")


@triton.jit
def store_block(ptr, row64, row_stride, col, mask, value, SOFTWARE_BF16: tl.constexpr):
    """``value`` (float32) rounded to ptr's dtype, stored into the block's elements."""
    tl.store(
        ptr + row64 * row_stride + col[None, :],
        to_storage(value, ptr.dtype.element_ty, SOFTWARE_BF16),
        mask=mask,
    )


@triton.jit
def store_chunk(row_ptr, col, mask, value, SOFTWARE_BF16: tl.constexpr):
    """A ``wide`` kernel's store: ``value`` (float32) rounded to the row's dtype."""
    tl.store(row_ptr + col, to_storage(value, row_ptr.dtype.element_ty, SOFTWARE_BF16), mask=mask)


def fixed_config(block_n: int) -> triton.Config:
    block_rows = max(1, TILE_ELEMENTS // block_n)
    num_warps = min(32, max(4, block_rows * block_n // (32 * ELEMENTS_PER_THREAD)))
    return triton.Config(
        {"BLOCK_ROWS": block_rows, "LATE_PARAMS": False}, num_warps=num_warps, num_stages=1
    )


def tuning_configs(rows: int, hidden: int, multiprocessors: int = 132) -> list[triton.Config]:
    """The candidates tuned for a [rows, hidden] call (rows-per-program bucketed by powers of two)."""
    block_n = triton.next_power_of_2(hidden)
    tile = max(block_n, TUNE_TILE)
    block_rows = min(tile // block_n, tuning.rows_bucket(rows))
    programs = triton.cdiv(tuning.rows_bucket(rows), block_rows)
    # Under two programs per SM the call is one round trip to memory: parameters loaded first.
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
    return configs or [fixed_config(block_n)]


class RowNorm:
    """One norm's kernels and tuners. ``streams``: the [rows, hidden] tensors a call reads and
    writes, for the warm-or-cold choice of timing."""

    def __init__(self, rows_kernel, wide_kernel, streams: int) -> None:
        self.rows_kernel = rows_kernel
        self.wide_kernel = wide_kernel
        self.streams = streams
        self.tuners = tuning.Tuners(
            rows_kernel,
            ["hidden"],  # with the exact width, the tuner's tag and the dtypes
            lambda block_n, rows_bucket, sms: tuning_configs(rows_bucket, block_n, sms),
        )

    def launch(self, x, args: tuple, config: triton.Config | None, fixed: bool = False) -> None:
        """``args``: the kernels' arguments up to ``eps`` (rows and hidden from x's shape).
        ``config``: that plan, untuned; None: the tuned plan, or the fixed one for small calls, under
        the interpreter and where ``fixed``."""
        rows, hidden = x.shape
        if rows == 0 or hidden == 0:
            return
        block_n = triton.next_power_of_2(hidden)
        interpreted = tuning.INTERPRETED
        if block_n > MAX_ROW_BLOCK:
            self.wide_kernel[(rows,)](
                *args, CHUNK=WIDE_CHUNK, SOFTWARE_BF16=interpreted, num_warps=16
            )
            return
        meta = {"BLOCK_N": block_n, "EVEN_N": hidden == block_n, "SOFTWARE_BF16": interpreted}
        small = not tuning.tunes(x) or rows * hidden < TUNE_MIN_ELEMENTS
        if config is None and (small or fixed):
            config = fixed_config(block_n)
        if config is not None:
            grid = (triton.cdiv(rows, config.kwargs["BLOCK_ROWS"]),)
            self.rows_kernel[grid](*args, tune_tag=0, **meta, **config.all_kwargs())
            return
        warm = self.streams * rows * hidden * x.element_size() < tuning.WARM_TUNE_MAX_BYTES
        bucket = (block_n, tuning.rows_bucket(rows), tuning.multiprocessors(x.device.index or 0))
        tag = tuning.tune_tag(x.device, *bucket, warm)
        grid = lambda m: (triton.cdiv(rows, m["BLOCK_ROWS"]),)  # noqa: E731
        self.tuners(*bucket, warm)[grid](*args, tune_tag=tag, **meta)
