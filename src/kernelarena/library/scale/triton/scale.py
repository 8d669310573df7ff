"""scale in Triton: out = x * factor, computed in float32 and rounded once.

The operator is memory-bound, so the kernel's job is to keep HBM busy:
- Each program owns a [BLOCK_ROWS, BLOCK_COLS] tile. With 16-byte alignment (Triton specializes
  pointers and strides divisible by 16), every thread moves 16-byte vectors.
- The tile (elements and warps per program) is tuned on the device the first time a (width,
  row-count bucket, dtype) is seen: tiles.py in library/_shared/, shared with the gated
  activations, says over which candidates and how.
- out is the next kernel's input, so stores keep the default policy and may stay in the 50-60 MB
  L2 when they fit.
- Row offsets are int64: a million rows of 16K elements is 2^34 elements.
"""

import torch
import triton
import triton.language as tl

from ._shared.tiles import Tiles, tuning_configs  # noqa: F401 (tests)


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
    tune_tag,  # never read: names the tuner in its tuning key (see tuning.py)
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


# The tuning key adds the width, the tuner's tag and the dtypes; x and out are read and written.
_PLANS = Tiles(_scale_kernel, ["cols"], streams=2)
tuned_plans = _PLANS.tuners.plans


def _launch(x, factor, out, config: triton.Config | None) -> None:
    """``config``: that plan, untuned; None: the tuned plan (or the fixed one for small calls)."""
    if x.ndim != 2 or out.shape != x.shape or out.dtype != x.dtype:
        raise ValueError(
            f"scale: x {tuple(x.shape)} {x.dtype} and out {tuple(out.shape)} {out.dtype}"
        )
    if x.stride(1) != 1 or out.stride(1) != 1:
        raise ValueError("scale: the last dimension of x and out must be contiguous")
    rows, cols = x.shape
    _PLANS.launch(
        x, (x, out, float(factor), rows, cols, x.stride(0), out.stride(0)), rows, cols, config
    )


def run(x: torch.Tensor, factor: float, out: torch.Tensor) -> None:
    _launch(x, factor, out, None)


def run_with_config(x: torch.Tensor, factor: float, out: torch.Tensor, config) -> None:
    """One candidate plan, untuned (tests run every candidate)."""
    _launch(x, factor, out, config)
