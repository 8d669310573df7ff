"""rmsnorm in Triton: out = x * rsqrt(mean(x^2) + eps) * weight, float32 math, one rounding.

Up to MAX_ROW_BLOCK columns a program holds whole rows in registers, so x is read once and out
written once (the bandwidth floor); narrow rows are packed several to a program so that each one
still moves a few KB. Wider rows take two passes over x (the second mostly from L2).
"""

import os

import torch
import triton
import triton.language as tl

MAX_ROW_BLOCK = 32768  # 64 KB of bfloat16 per row: 32 values per thread at 32 warps
WIDE_CHUNK = 8192
TILE_ELEMENTS = 2048  # narrow rows: rows per program so a program covers at least this much
ELEMENTS_PER_THREAD = 16  # two 16-byte vectors of 16-bit values per thread
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


@triton.jit(do_not_specialize=["rows"])
def _rmsnorm_rows(
    x_ptr,
    w_ptr,
    out_ptr,
    rows,
    hidden,
    x_row_stride,
    out_row_stride,
    eps,
    BLOCK_ROWS: tl.constexpr,
    BLOCK_N: tl.constexpr,
    SOFTWARE_BF16: tl.constexpr,
):
    row = tl.program_id(0) * BLOCK_ROWS + tl.arange(0, BLOCK_ROWS)
    col = tl.arange(0, BLOCK_N)
    col_in = col < hidden
    mask = (row < rows)[:, None] & col_in[None, :]
    row64 = row.to(tl.int64)[:, None]
    x = tl.load(x_ptr + row64 * x_row_stride + col[None, :], mask=mask, other=0.0)
    w = tl.load(w_ptr + col, mask=col_in, other=0.0, eviction_policy="evict_last")
    x = x.to(tl.float32)
    rstd = tl.rsqrt(tl.sum(x * x, axis=1) / hidden + eps)
    y = x * rstd[:, None] * w.to(tl.float32)[None, :]
    tl.store(
        out_ptr + row64 * out_row_stride + col[None, :],
        _to_storage(y, out_ptr.dtype.element_ty, SOFTWARE_BF16),
        mask=mask,
    )


@triton.jit(do_not_specialize=["rows"])
def _rmsnorm_wide(
    x_ptr,
    w_ptr,
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
        tl.store(
            out_row + col,
            _to_storage(x * rstd * w, out_ptr.dtype.element_ty, SOFTWARE_BF16),
            mask=mask,
        )


def _check(x: torch.Tensor, weight: torch.Tensor, out: torch.Tensor) -> None:
    if x.dim() != 2 or out.shape != x.shape or weight.shape != (x.shape[1],):
        raise ValueError(
            f"rmsnorm: x {tuple(x.shape)}, weight {tuple(weight.shape)}, out {tuple(out.shape)}"
        )
    if x.shape[1] > 1 and (x.stride(1) != 1 or out.stride(1) != 1 or weight.stride(0) != 1):
        raise ValueError("rmsnorm: the last dimension of x, out and weight must be contiguous")


def run(x: torch.Tensor, weight: torch.Tensor, eps: float, out: torch.Tensor) -> None:
    _check(x, weight, out)
    rows, hidden = x.shape
    if rows == 0 or hidden == 0:
        return
    block_n = triton.next_power_of_2(hidden)
    args = (x, weight, out, rows, hidden, x.stride(0), out.stride(0), float(eps))
    if block_n > MAX_ROW_BLOCK:
        _rmsnorm_wide[(rows,)](*args, CHUNK=WIDE_CHUNK, SOFTWARE_BF16=INTERPRETED, num_warps=16)
        return
    block_rows = max(1, TILE_ELEMENTS // block_n)
    num_warps = min(32, max(4, block_rows * block_n // (32 * ELEMENTS_PER_THREAD)))
    grid = (triton.cdiv(rows, block_rows),)
    _rmsnorm_rows[grid](
        *args,
        BLOCK_ROWS=block_rows,
        BLOCK_N=block_n,
        SOFTWARE_BF16=INTERPRETED,
        num_warps=num_warps,
    )
