"""layernorm in Triton: out = (x - mean) * rsqrt(var + eps) * weight + bias, float32 math, one rounding.

Up to MAX_ROW_BLOCK columns a program holds whole rows in registers, so x is read once and out
written once (the bandwidth floor), and the variance is the exact two-pass one, taken from x - mean
in registers. Narrow rows are packed several to a program. Wider rows take two passes over x; their
variance comes from sums of x - x[0] and its square (shifted by the row's first value, so a mean
large against the spread does not cancel).
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
    b = tl.load(b_ptr + col, mask=col_in, other=0.0, eviction_policy="evict_last")
    x = x.to(tl.float32)
    mean = tl.sum(x, axis=1) / hidden
    centered = tl.where(mask, x - mean[:, None], 0.0)
    rstd = tl.rsqrt(tl.sum(centered * centered, axis=1) / hidden + eps)
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


def run(
    x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor, eps: float, out: torch.Tensor
) -> None:
    _check(x, weight, bias, out)
    rows, hidden = x.shape
    if rows == 0 or hidden == 0:
        return
    block_n = triton.next_power_of_2(hidden)
    args = (x, weight, bias, out, rows, hidden, x.stride(0), out.stride(0), float(eps))
    if block_n > MAX_ROW_BLOCK:
        _layernorm_wide[(rows,)](*args, CHUNK=WIDE_CHUNK, SOFTWARE_BF16=INTERPRETED, num_warps=16)
        return
    block_rows = max(1, TILE_ELEMENTS // block_n)
    num_warps = min(32, max(4, block_rows * block_n // (32 * ELEMENTS_PER_THREAD)))
    grid = (triton.cdiv(rows, block_rows),)
    _layernorm_rows[grid](
        *args,
        BLOCK_ROWS=block_rows,
        BLOCK_N=block_n,
        SOFTWARE_BF16=INTERPRETED,
        num_warps=num_warps,
    )
