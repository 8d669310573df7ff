"""scale in Triton: out = x * factor, computed in float32 and rounded once.

The operator is memory-bound, so the kernel's job is to keep HBM busy:
- Each program owns a [BLOCK_ROWS, BLOCK_COLS] tile of up to 4096 elements. With 16-byte alignment
  (Triton specializes pointers and strides divisible by 16), every thread moves 16-byte vectors.
- The launcher shrinks tiles for launch-bound shapes (a few hundred rows) so that every SM gets a
  program, and keeps big tiles otherwise (fewer programs, more bytes in flight per program).
- x is read once: loads use evict_first. out is the next kernel's input, so stores keep the default
  policy and may stay in the 50-60 MB L2 when they fit.
- Row offsets are int64: a million rows of 16K elements is 2^34 elements.
"""

import functools

import torch
import triton
import triton.language as tl

_TILE = 4096  # elements per program at large sizes: 8 KiB of bf16 read per program
_MIN_TILE = 512  # smallest tile when shrinking for small shapes
_ELEMENTS_PER_THREAD = 16  # two 16-byte vectors of bf16 per thread at full tiles


# rows only bounds the mask: specializing on it (== 1, divisible by 16) would only add compiles.
@triton.jit(do_not_specialize=["rows"])
def _scale_kernel(
    x_ptr,
    out_ptr,
    factor,
    rows,
    cols,
    x_row_stride,
    out_row_stride,
    BLOCK_ROWS: tl.constexpr,
    BLOCK_COLS: tl.constexpr,
):
    row = tl.program_id(0).to(tl.int64) * BLOCK_ROWS + tl.arange(0, BLOCK_ROWS).to(tl.int64)
    col = tl.program_id(1) * BLOCK_COLS + tl.arange(0, BLOCK_COLS)
    mask = (row[:, None] < rows) & (col[None, :] < cols)
    x = tl.load(
        x_ptr + row[:, None] * x_row_stride + col[None, :], mask=mask, eviction_policy="evict_first"
    )
    y = x.to(tl.float32) * factor
    out_offsets = row[:, None] * out_row_stride + col[None, :]
    tl.store(out_ptr + out_offsets, y.to(out_ptr.dtype.element_ty), mask=mask)


@functools.lru_cache(maxsize=16)
def _multiprocessors(device_index: int) -> int:
    return torch.cuda.get_device_properties(device_index).multi_processor_count


def _tiling(rows: int, cols: int, device: torch.device) -> tuple[int, int, int]:
    """(BLOCK_ROWS, BLOCK_COLS, num_warps) for a [rows, cols] problem."""
    block_cols = min(triton.next_power_of_2(cols), _TILE)
    block_rows = min(_TILE // block_cols, triton.next_power_of_2(rows))
    # Two programs per SM at least; under the interpreter (CPU) fewer programs run faster.
    wanted = 2 * _multiprocessors(device.index or 0) if device.type == "cuda" else 1
    while (
        block_rows * block_cols > _MIN_TILE
        and triton.cdiv(rows, block_rows) * triton.cdiv(cols, block_cols) < wanted
    ):
        if block_rows > 1:
            block_rows //= 2
        else:
            block_cols //= 2
    tile = block_rows * block_cols
    num_warps = max(1, min(8, tile // (32 * _ELEMENTS_PER_THREAD)))
    return block_rows, block_cols, num_warps


def run(x: torch.Tensor, factor: float, out: torch.Tensor) -> None:
    if x.ndim != 2 or out.shape != x.shape or out.dtype != x.dtype:
        raise ValueError(
            f"scale: x {tuple(x.shape)} {x.dtype} and out {tuple(out.shape)} {out.dtype}"
        )
    if x.stride(1) != 1 or out.stride(1) != 1:
        raise ValueError("scale: the last dimension of x and out must be contiguous")
    rows, cols = x.shape
    if rows == 0 or cols == 0:
        return
    block_rows, block_cols, num_warps = _tiling(rows, cols, x.device)
    grid = (triton.cdiv(rows, block_rows), triton.cdiv(cols, block_cols))
    _scale_kernel[grid](
        x,
        out,
        float(factor),
        rows,
        cols,
        x.stride(0),
        out.stride(0),
        BLOCK_ROWS=block_rows,
        BLOCK_COLS=block_cols,
        num_warps=num_warps,
    )
