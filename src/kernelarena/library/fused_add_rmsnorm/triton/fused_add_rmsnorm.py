"""fused_add_rmsnorm in Triton: residual_out = x + residual (added in float32, rounded once to the
storage dtype); out = residual_out * rsqrt(mean(residual_out^2) + eps) * weight in float32, rounded
once. ``run`` writes out and residual_out; ``run_inplace`` writes them into x and residual.

Up to MAX_ROW_BLOCK columns a program holds BLOCK_ROWS whole rows in registers: x and residual are
read once, out and residual_out written once (the bandwidth floor). Wider rows take two passes: the
second reads residual_out back (mostly from L2). In place, each element is loaded before the
program stores to it, and programs own disjoint rows.

The launch plans are the norms' (row_norm.py in library/_shared/): tuned on the device the first
time a (width, row-count bucket, dtype) is seen, warps per program and weight loaded before or after
the reduction; calls under TUNE_MIN_ELEMENTS and the interpreter take the fixed plan. EVEN_N (a
power-of-two width) drops the column masks.

In place, always the fixed plan (16 values a thread), never a tuned one: under a tuned plan (64
values a thread) an in-place fp32 call produced rows whose scale was off by a constant factor, as
if the compiler, short of registers, had reloaded x and residual for the reduction after the
residual store (legal only without aliasing). The fixed plan passes every in-place test
(docs/kernels/fused_add_rmsnorm.md).
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
    to_storage,
    tuning_configs,
)


@triton.jit(do_not_specialize=["rows", "tune_tag"])
def _fused_add_rmsnorm_rows(
    x_ptr, r_ptr, w_ptr, out_ptr, r_out_ptr,
    rows, hidden, x_row_stride, r_row_stride, out_row_stride, r_out_row_stride, eps,
    tune_tag,  # never read: names the tuner in its tuning key (tuning.tune_tag)
    BLOCK_ROWS: tl.constexpr, BLOCK_N: tl.constexpr, EVEN_N: tl.constexpr,
    LATE_PARAMS: tl.constexpr, SOFTWARE_BF16: tl.constexpr,
):  # fmt: skip
    row64, col, col_in, mask = row_block(rows, hidden, BLOCK_ROWS, BLOCK_N, EVEN_N)
    x = load_block(x_ptr, row64, x_row_stride, col, mask)
    r = load_block(r_ptr, row64, r_row_stride, col, mask)
    if not LATE_PARAMS:
        w = load_params(w_ptr, col, col_in)
    s = to_storage(x.to(tl.float32) + r.to(tl.float32), r_out_ptr.dtype.element_ty, SOFTWARE_BF16)
    tl.store(r_out_ptr + row64 * r_out_row_stride + col[None, :], s, mask=mask)
    s = s.to(tl.float32)
    rstd = tl.rsqrt(tl.sum(s * s, axis=1) / hidden + eps)
    if LATE_PARAMS:
        w = load_params(w_ptr, col, col_in)
    y = s * rstd[:, None] * w.to(tl.float32)[None, :]
    store_block(out_ptr, row64, out_row_stride, col, mask, y, SOFTWARE_BF16)


@triton.jit(do_not_specialize=["rows"])
def _fused_add_rmsnorm_wide(
    x_ptr, r_ptr, w_ptr, out_ptr, r_out_ptr,
    rows, hidden, x_row_stride, r_row_stride, out_row_stride, r_out_row_stride, eps,
    CHUNK: tl.constexpr, SOFTWARE_BF16: tl.constexpr,
):  # fmt: skip
    row = tl.program_id(0).to(tl.int64)
    x_row = x_ptr + row * x_row_stride
    r_row = r_ptr + row * r_row_stride
    out_row = out_ptr + row * out_row_stride
    r_out_row = r_out_ptr + row * r_out_row_stride
    partial = tl.zeros([CHUNK], dtype=tl.float32)
    for start in range(0, hidden, CHUNK):
        col = start + tl.arange(0, CHUNK)
        mask = col < hidden
        x = tl.load(x_row + col, mask=mask, other=0.0).to(tl.float32)
        r = tl.load(r_row + col, mask=mask, other=0.0).to(tl.float32)
        s = to_storage(x + r, r_out_ptr.dtype.element_ty, SOFTWARE_BF16)
        tl.store(r_out_row + col, s, mask=mask)
        s = s.to(tl.float32)
        partial += s * s
    rstd = tl.rsqrt(tl.sum(partial, axis=0) / hidden + eps)
    tl.debug_barrier()  # residual_out is read back below, by the threads of this program
    for start in range(0, hidden, CHUNK):
        col = start + tl.arange(0, CHUNK)
        mask = col < hidden
        s = tl.load(r_out_row + col, mask=mask, other=0.0).to(tl.float32)
        w = tl.load(w_ptr + col, mask=mask, other=0.0).to(tl.float32)
        store_chunk(out_row, col, mask, s * rstd * w, SOFTWARE_BF16)


# -- launch plans (library/_shared/row_norm.py) ------------------------------------------------

_PLANS = RowNorm(_fused_add_rmsnorm_rows, _fused_add_rmsnorm_wide, streams=4)
tuned_plans = _PLANS.tuners.plans


def _check(x, residual, weight, out, residual_out) -> None:
    tensors = {"x": x, "residual": residual, "out": out, "residual_out": residual_out}
    if any(t.dim() != 2 or t.shape != x.shape for t in tensors.values()) or weight.shape != (
        x.shape[1],
    ):
        shapes = {name: tuple(t.shape) for name, t in {**tensors, "weight": weight}.items()}
        raise ValueError(f"fused_add_rmsnorm: shapes {shapes}")
    if x.shape[1] > 1 and (
        any(t.stride(1) != 1 for t in tensors.values()) or weight.stride(0) != 1
    ):
        raise ValueError("fused_add_rmsnorm: the last dimension of every tensor must be contiguous")


def _launch(x, residual, weight, eps, out, residual_out, config, inplace: bool = False) -> None:
    """``config``: that plan, untuned; None: the tuned plan (or the fixed one for small calls and
    in place)."""
    _check(x, residual, weight, out, residual_out)
    rows, hidden = x.shape
    args = (x, residual, weight, out, residual_out, rows, hidden, x.stride(0), residual.stride(0),
            out.stride(0), residual_out.stride(0), float(eps))  # fmt: skip
    _PLANS.launch(x, args, config, fixed=inplace)


def run(
    x: torch.Tensor,
    residual: torch.Tensor,
    weight: torch.Tensor,
    eps: float,
    out: torch.Tensor,
    residual_out: torch.Tensor,
) -> None:
    _launch(x, residual, weight, eps, out, residual_out, None)


def run_inplace(x: torch.Tensor, residual: torch.Tensor, weight: torch.Tensor, eps: float) -> None:
    _launch(x, residual, weight, eps, x, residual, None, inplace=True)


def run_with_config(x, residual, weight, eps, out, residual_out, config: triton.Config) -> None:
    """One candidate plan, untuned (tests run every candidate; out may alias x, residual_out
    residual, as in place)."""
    _launch(x, residual, weight, eps, out, residual_out, config)
