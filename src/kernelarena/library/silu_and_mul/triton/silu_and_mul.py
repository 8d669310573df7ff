"""silu_and_mul in Triton: out[r, :] = silu(x[r, :d]) * x[r, d:], in float32, rounded once.

The layout of scale's kernel (library/scale/triton/scale.py), read twice per tile: the gate half
and the up half of each row, d elements apart.
- silu(g) = g * sigmoid(g) = g / (1 + 2^(-g log2 e)): tl.exp2 is ex2.approx.f32 and fp32 division
  is div.full.f32 (2 ulp), about 2e-6 relative error in all; where 2^(-g log2 e) overflows
  (g < -88) the quotient is g / inf = -0, the limit.
- 16-byte vectors when d and the row strides are multiples of 16 elements (Triton specializes
  arguments divisible by 16); loads evict_first since x is read once.
- int64 row offsets; tiles shrink for launch-bound shapes so that every SM gets a program.
"""

import functools

import torch
import triton
import triton.language as tl

_TILE = 4096  # output elements per program at large sizes
_MIN_TILE = 512
_ELEMENTS_PER_THREAD = 16
_LOG2E = tl.constexpr(1.4426950408889634)  # kernels may read only constexpr globals


# rows only bounds the mask: specializing on it (== 1, divisible by 16) would only add compiles.
@triton.jit(do_not_specialize=["rows"])
def _silu_and_mul_kernel(
    x_ptr,
    out_ptr,
    rows,
    d,
    x_row_stride,
    out_row_stride,
    BLOCK_ROWS: tl.constexpr,
    BLOCK_D: tl.constexpr,
):
    row = tl.program_id(0).to(tl.int64) * BLOCK_ROWS + tl.arange(0, BLOCK_ROWS).to(tl.int64)
    col = tl.program_id(1) * BLOCK_D + tl.arange(0, BLOCK_D)
    mask = (row[:, None] < rows) & (col[None, :] < d)
    gate_ptr = x_ptr + row[:, None] * x_row_stride + col[None, :]
    gate = tl.load(gate_ptr, mask=mask, other=0.0, eviction_policy="evict_first")
    up = tl.load(gate_ptr + d, mask=mask, other=0.0, eviction_policy="evict_first")
    gate = gate.to(tl.float32)
    silu = gate / (1.0 + tl.exp2(gate * -_LOG2E))
    out = silu * up.to(tl.float32)
    out_offsets = row[:, None] * out_row_stride + col[None, :]
    tl.store(out_ptr + out_offsets, out.to(out_ptr.dtype.element_ty), mask=mask)


@functools.lru_cache(maxsize=16)
def _multiprocessors(device_index: int) -> int:
    return torch.cuda.get_device_properties(device_index).multi_processor_count


def _tiling(rows: int, cols: int, device: torch.device) -> tuple[int, int, int]:
    """(BLOCK_ROWS, BLOCK_D, num_warps) for ``rows`` rows of ``cols`` outputs."""
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
    num_warps = max(1, min(8, block_rows * block_cols // (32 * _ELEMENTS_PER_THREAD)))
    return block_rows, block_cols, num_warps


def run(x: torch.Tensor, out: torch.Tensor) -> None:
    if x.ndim != 2 or out.ndim != 2 or x.shape[1] != 2 * out.shape[1] or x.shape[0] != out.shape[0]:
        raise ValueError(
            f"silu_and_mul: x {tuple(x.shape)} must be [rows, 2 d] "
            f"and out {tuple(out.shape)} [rows, d]"
        )
    if out.dtype != x.dtype:
        raise ValueError(f"silu_and_mul: out is {out.dtype}, x is {x.dtype}")
    rows, d = out.shape
    if rows == 0 or d == 0:
        return
    if x.stride(1) != 1 or out.stride(1) != 1:
        raise ValueError("silu_and_mul: the last dimension of x and out must be contiguous")
    block_rows, block_d, num_warps = _tiling(rows, d, x.device)
    grid = (triton.cdiv(rows, block_rows), triton.cdiv(d, block_d))
    _silu_and_mul_kernel[grid](
        x,
        out,
        rows,
        d,
        x.stride(0),
        out.stride(0),
        BLOCK_ROWS=block_rows,
        BLOCK_D=block_d,
        num_warps=num_warps,
    )
