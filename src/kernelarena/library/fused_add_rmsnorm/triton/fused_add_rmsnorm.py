"""fused_add_rmsnorm in Triton: residual_out = x + residual (added in float32, rounded once to the
storage dtype); out = residual_out * rsqrt(mean(residual_out^2) + eps) * weight in float32, rounded
once. ``run`` writes out and residual_out; ``run_inplace`` writes them into x and residual.

Up to MAX_ROW_BLOCK columns a program holds whole rows in registers: x and residual are read once,
out and residual_out written once (the bandwidth floor); narrow rows are packed several to a
program. Wider rows take two passes: the second reads residual_out back (mostly from L2).
In place, each element is loaded before the program stores to it, and programs own disjoint rows.
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
def _fused_add_rmsnorm_rows(
    x_ptr,
    r_ptr,
    w_ptr,
    out_ptr,
    r_out_ptr,
    rows,
    hidden,
    x_row_stride,
    r_row_stride,
    out_row_stride,
    r_out_row_stride,
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
    r = tl.load(r_ptr + row64 * r_row_stride + col[None, :], mask=mask, other=0.0)
    s = _to_storage(x.to(tl.float32) + r.to(tl.float32), r_out_ptr.dtype.element_ty, SOFTWARE_BF16)
    tl.store(r_out_ptr + row64 * r_out_row_stride + col[None, :], s, mask=mask)
    w = tl.load(w_ptr + col, mask=col_in, other=0.0, eviction_policy="evict_last")
    s = s.to(tl.float32)
    rstd = tl.rsqrt(tl.sum(s * s, axis=1) / hidden + eps)
    y = s * rstd[:, None] * w.to(tl.float32)[None, :]
    tl.store(
        out_ptr + row64 * out_row_stride + col[None, :],
        _to_storage(y, out_ptr.dtype.element_ty, SOFTWARE_BF16),
        mask=mask,
    )


@triton.jit(do_not_specialize=["rows"])
def _fused_add_rmsnorm_wide(
    x_ptr,
    r_ptr,
    w_ptr,
    out_ptr,
    r_out_ptr,
    rows,
    hidden,
    x_row_stride,
    r_row_stride,
    out_row_stride,
    r_out_row_stride,
    eps,
    CHUNK: tl.constexpr,
    SOFTWARE_BF16: tl.constexpr,
):
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
        s = _to_storage(x + r, r_out_ptr.dtype.element_ty, SOFTWARE_BF16)
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
        tl.store(
            out_row + col,
            _to_storage(s * rstd * w, out_ptr.dtype.element_ty, SOFTWARE_BF16),
            mask=mask,
        )


def _launch(x, residual, weight, eps, out, residual_out) -> None:
    tensors = {"x": x, "residual": residual, "out": out, "residual_out": residual_out}
    if any(t.dim() != 2 or t.shape != x.shape for t in tensors.values()) or weight.shape != (
        x.shape[1],
    ):
        shapes = {name: tuple(t.shape) for name, t in {**tensors, "weight": weight}.items()}
        raise ValueError(f"fused_add_rmsnorm: shapes {shapes}")
    rows, hidden = x.shape
    if rows == 0 or hidden == 0:
        return
    if hidden > 1 and (any(t.stride(1) != 1 for t in tensors.values()) or weight.stride(0) != 1):
        raise ValueError("fused_add_rmsnorm: the last dimension of every tensor must be contiguous")
    args = (x, residual, weight, out, residual_out, rows, hidden, x.stride(0), residual.stride(0),
            out.stride(0), residual_out.stride(0), float(eps))  # fmt: skip
    block_n = triton.next_power_of_2(hidden)
    if block_n > MAX_ROW_BLOCK:
        _fused_add_rmsnorm_wide[(rows,)](
            *args, CHUNK=WIDE_CHUNK, SOFTWARE_BF16=INTERPRETED, num_warps=16
        )
        return
    block_rows = max(1, TILE_ELEMENTS // block_n)
    num_warps = min(32, max(4, block_rows * block_n // (32 * ELEMENTS_PER_THREAD)))
    grid = (triton.cdiv(rows, block_rows),)
    _fused_add_rmsnorm_rows[grid](
        *args,
        BLOCK_ROWS=block_rows,
        BLOCK_N=block_n,
        SOFTWARE_BF16=INTERPRETED,
        num_warps=num_warps,
    )


def run(
    x: torch.Tensor,
    residual: torch.Tensor,
    weight: torch.Tensor,
    eps: float,
    out: torch.Tensor,
    residual_out: torch.Tensor,
) -> None:
    _launch(x, residual, weight, eps, out, residual_out)


def run_inplace(x: torch.Tensor, residual: torch.Tensor, weight: torch.Tensor, eps: float) -> None:
    _launch(x, residual, weight, eps, x, residual)
