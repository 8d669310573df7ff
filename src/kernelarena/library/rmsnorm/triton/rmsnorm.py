"""rmsnorm in Triton: out = x * rsqrt(mean(x^2) + eps) * weight, float32 math, one rounding.

Up to MAX_ROW_BLOCK columns a program holds BLOCK_ROWS whole rows in registers, so x is read once
and out written once (the bandwidth floor). Wider rows take two passes over x (the second mostly
from L2).

The launch plans (row_norm.py in library/_shared/, shared by the norms) are tuned on the device
the first time a (width, row-count bucket, dtype) is seen: warps per program, and whether weight is
loaded before the reduction or after it (LATE_PARAMS). Calls under TUNE_MIN_ELEMENTS and the
interpreter take the fixed plan. EVEN_N (a power-of-two width) drops the column masks.
"""

import torch
import triton
import triton.language as tl

from ._shared.row_norm import (  # noqa: F401 (tuning_configs: tests)
    RowNorm,
    load_block,
    load_params,
    row_block,
    store_block,
    store_chunk,
    tuning_configs,
)


@triton.jit(do_not_specialize=["rows", "tune_tag"])
def _rmsnorm_rows(
    x_ptr, w_ptr, out_ptr,
    rows, hidden, x_row_stride, out_row_stride, eps,
    tune_tag,  # never read: names the tuner in its tuning key (tuning.tune_tag)
    BLOCK_ROWS: tl.constexpr, BLOCK_N: tl.constexpr, EVEN_N: tl.constexpr,
    LATE_PARAMS: tl.constexpr, SOFTWARE_BF16: tl.constexpr,
):  # fmt: skip
    row64, col, col_in, mask = row_block(rows, hidden, BLOCK_ROWS, BLOCK_N, EVEN_N)
    x = load_block(x_ptr, row64, x_row_stride, col, mask)
    if not LATE_PARAMS:
        w = load_params(w_ptr, col, col_in)
    x = x.to(tl.float32)
    rstd = tl.rsqrt(tl.sum(x * x, axis=1) / hidden + eps)
    if LATE_PARAMS:
        w = load_params(w_ptr, col, col_in)
    y = x * rstd[:, None] * w.to(tl.float32)[None, :]
    store_block(out_ptr, row64, out_row_stride, col, mask, y, SOFTWARE_BF16)


@triton.jit(do_not_specialize=["rows"])
def _rmsnorm_wide(
    x_ptr, w_ptr, out_ptr,
    rows, hidden, x_row_stride, out_row_stride, eps,
    CHUNK: tl.constexpr, SOFTWARE_BF16: tl.constexpr,
):  # fmt: skip
    row = tl.program_id(0).to(tl.int64)
    x_row = x_ptr + row * x_row_stride
    out_row = out_ptr + row * out_row_stride
    partial = tl.zeros([CHUNK], dtype=tl.float32)
    for start in range(0, hidden, CHUNK):
        col = start + tl.arange(0, CHUNK)
        x = tl.load(x_row + col, mask=col < hidden, other=0.0).to(tl.float32)
        partial += x * x
    rstd = tl.rsqrt(tl.sum(partial, axis=0) / hidden + eps)
    for start in range(0, hidden, CHUNK):
        col = start + tl.arange(0, CHUNK)
        mask = col < hidden
        x = tl.load(x_row + col, mask=mask, other=0.0).to(tl.float32)
        w = tl.load(w_ptr + col, mask=mask, other=0.0).to(tl.float32)
        store_chunk(out_row, col, mask, x * rstd * w, SOFTWARE_BF16)


# -- launch plans (library/_shared/row_norm.py) ------------------------------------------------

_PLANS = RowNorm(_rmsnorm_rows, _rmsnorm_wide, streams=2)
tuned_plans = _PLANS.tuners.plans


def _check(x: torch.Tensor, weight: torch.Tensor, out: torch.Tensor) -> None:
    if x.dim() != 2 or out.shape != x.shape or weight.shape != (x.shape[1],):
        raise ValueError(
            f"rmsnorm: x {tuple(x.shape)}, weight {tuple(weight.shape)}, out {tuple(out.shape)}"
        )
    if x.shape[1] > 1 and (x.stride(1) != 1 or out.stride(1) != 1 or weight.stride(0) != 1):
        raise ValueError("rmsnorm: the last dimension of x, out and weight must be contiguous")


def _launch(x, weight, eps, out, config: triton.Config | None) -> None:
    """``config``: that plan, untuned; None: the tuned plan (or the fixed one for small calls)."""
    _check(x, weight, out)
    rows, hidden = x.shape
    _PLANS.launch(x, (x, weight, out, rows, hidden, x.stride(0), out.stride(0), float(eps)), config)


def run(x: torch.Tensor, weight: torch.Tensor, eps: float, out: torch.Tensor) -> None:
    _launch(x, weight, eps, out, None)


def run_with_config(
    x: torch.Tensor, weight: torch.Tensor, eps: float, out: torch.Tensor, config: triton.Config
) -> None:
    """One candidate plan, untuned (tests run every candidate)."""
    _launch(x, weight, eps, out, config)
