"""gelu_and_mul and gelu_tanh_and_mul in Triton: out[r, :] = gelu(x[r, :d]) * x[r, d:].

One kernel for both GELUs (FlashInfer's names: ``run`` is exact, ``run_tanh`` the approximation),
with the tiling of scale's kernel (library/scale/triton/scale.py) reading the gate and up halves.
- tanh GELU: 0.5 g (1 + tanh(z)) = g * sigmoid(2 z) = g / (1 + 2^(-2 z log2 e)), z = sqrt(2/pi)
  (g + 0.044715 g^3): one ex2.approx and one div.full.f32 like SiLU, about 3e-6 relative error,
  and exact limits: where the exponential overflows (g < -10) the quotient is g / inf = -0.
- exact GELU: 0.5 g (1 + erf(g / sqrt 2)) with libdevice's erf (2 ulp).
- 16-byte vectors when d and the row strides are multiples of 16 elements; evict_first loads;
  int64 row offsets; tiles shrink for launch-bound shapes.
"""

import functools

import torch
import triton
import triton.language as tl

_TILE = 4096  # output elements per program at large sizes
_MIN_TILE = 512
_ELEMENTS_PER_THREAD = 16
# Kernels may read only constexpr globals.
_TWO_Z_LINEAR = tl.constexpr(2 * 0.7978845608028654 * 1.4426950408889634)  # 2 sqrt(2/pi) log2 e
_TWO_Z_CUBIC = tl.constexpr(2 * 0.7978845608028654 * 0.044715 * 1.4426950408889634)
_SQRT_HALF = tl.constexpr(0.7071067811865476)


# rows only bounds the mask: specializing on it (== 1, divisible by 16) would only add compiles.
@triton.jit(do_not_specialize=["rows"])
def _gelu_and_mul_kernel(
    x_ptr,
    out_ptr,
    rows,
    d,
    x_row_stride,
    out_row_stride,
    TANH: tl.constexpr,
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
    if TANH:
        two_z_log2e = gate * (_TWO_Z_LINEAR + _TWO_Z_CUBIC * gate * gate)
        gelu = gate / (1.0 + tl.exp2(-two_z_log2e))
    else:
        gelu = 0.5 * gate * (1.0 + tl.math.erf(gate * _SQRT_HALF))
    out = gelu * up.to(tl.float32)
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


def _gelu_and_mul(x: torch.Tensor, out: torch.Tensor, tanh: bool) -> None:
    name = "gelu_tanh_and_mul" if tanh else "gelu_and_mul"
    if x.ndim != 2 or out.ndim != 2 or x.shape[1] != 2 * out.shape[1] or x.shape[0] != out.shape[0]:
        raise ValueError(
            f"{name}: x {tuple(x.shape)} must be [rows, 2 d], out {tuple(out.shape)} [rows, d]"
        )
    if out.dtype != x.dtype:
        raise ValueError(f"{name}: out is {out.dtype}, x is {x.dtype}")
    rows, d = out.shape
    if rows == 0 or d == 0:
        return
    if x.stride(1) != 1 or out.stride(1) != 1:
        raise ValueError(f"{name}: the last dimension of x and out must be contiguous")
    block_rows, block_d, num_warps = _tiling(rows, d, x.device)
    grid = (triton.cdiv(rows, block_rows), triton.cdiv(d, block_d))
    _gelu_and_mul_kernel[grid](
        x,
        out,
        rows,
        d,
        x.stride(0),
        out.stride(0),
        TANH=tanh,
        BLOCK_ROWS=block_rows,
        BLOCK_D=block_d,
        num_warps=num_warps,
    )


def run(x: torch.Tensor, out: torch.Tensor) -> None:
    """gelu_and_mul: exact GELU (erf)."""
    _gelu_and_mul(x, out, tanh=False)


def run_tanh(x: torch.Tensor, out: torch.Tensor) -> None:
    """gelu_tanh_and_mul: GELU in its tanh approximation."""
    _gelu_and_mul(x, out, tanh=True)
