"""layernorm in Triton: out = (x - mean) * rsqrt(var + eps) * weight + bias, float32 math, one rounding.

Up to MAX_ROW_BLOCK columns a program holds BLOCK_ROWS whole rows in registers, so x is read once
and out written once (the bandwidth floor), and the variance is the exact two-pass one, taken from
x - mean in registers. Wider rows take two passes over x; their variance comes from sums of x - x[0]
and its square (shifted by the row's first value, so a mean large against the spread does not
cancel).

The launch plans (row_norm.py in library/_shared/, shared by the norms) are tuned on the device
the first time a (width, row-count bucket, dtype) is seen: warps per program, and whether weight and
bias are loaded before the two reductions or after them (LATE_PARAMS). Registers decided the large
shape: the previous fixed plan for 8192-wide rows (16 warps, weight and bias first, column masks)
took 51 registers a thread (ptxas, sm_90a, bf16), so two programs of 16 KB per SM, and reached 72%
of the copy bandwidth on an H200, against 97% for Inductor's 8 warps; at 8 warps with the loads late
and EVEN_N (a power-of-two width, no column masks) it takes 63 registers, four programs per SM.
Calls under TUNE_MIN_ELEMENTS and the interpreter take the fixed plan.
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
def _layernorm_rows(
    x_ptr, w_ptr, b_ptr, out_ptr,
    rows, hidden, x_row_stride, out_row_stride, eps,
    tune_tag,  # never read: names the tuner in its tuning key (tuning.tune_tag)
    BLOCK_ROWS: tl.constexpr, BLOCK_N: tl.constexpr, EVEN_N: tl.constexpr,
    LATE_PARAMS: tl.constexpr, SOFTWARE_BF16: tl.constexpr,
):  # fmt: skip
    row64, col, col_in, mask = row_block(rows, hidden, BLOCK_ROWS, BLOCK_N, EVEN_N)
    x = load_block(x_ptr, row64, x_row_stride, col, mask)
    if not LATE_PARAMS:
        w = load_params(w_ptr, col, col_in)
        b = load_params(b_ptr, col, col_in)
    x = x.to(tl.float32)
    mean = tl.sum(x, axis=1) / hidden
    if EVEN_N:  # noqa: SIM108
        centered = x - mean[:, None]
    else:
        centered = tl.where(col_in[None, :], x - mean[:, None], 0.0)
    rstd = tl.rsqrt(tl.sum(centered * centered, axis=1) / hidden + eps)
    if LATE_PARAMS:
        w = load_params(w_ptr, col, col_in)
        b = load_params(b_ptr, col, col_in)
    y = centered * rstd[:, None] * w.to(tl.float32)[None, :] + b.to(tl.float32)[None, :]
    store_block(out_ptr, row64, out_row_stride, col, mask, y, SOFTWARE_BF16)


@triton.jit(do_not_specialize=["rows"])
def _layernorm_wide(
    x_ptr, w_ptr, b_ptr, out_ptr,
    rows, hidden, x_row_stride, out_row_stride, eps,
    CHUNK: tl.constexpr, SOFTWARE_BF16: tl.constexpr,
):  # fmt: skip
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
        store_chunk(out_row, col, mask, (x - mean) * rstd * w + b, SOFTWARE_BF16)


# -- launch plans (library/_shared/row_norm.py) ------------------------------------------------

_PLANS = RowNorm(_layernorm_rows, _layernorm_wide, streams=2)
tuned_plans = _PLANS.tuners.plans


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
    args = (x, weight, bias, out, rows, hidden, x.stride(0), out.stride(0), float(eps))
    _PLANS.launch(x, args, config)


def run(
    x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor, eps: float, out: torch.Tensor
) -> None:
    _launch(x, weight, bias, eps, out, None)


def run_with_config(x, weight, bias, eps, out, config: triton.Config) -> None:
    """One candidate plan, untuned (tests run every candidate)."""
    _launch(x, weight, bias, eps, out, config)
