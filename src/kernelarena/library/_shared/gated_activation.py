"""The gated activations in Triton, one kernel for the family: out[r, :] = act(x[r, :d]) * x[r, d:],
in float32, rounded once. ``ACT`` picks the activation at compile time: SILU (silu_and_mul), GELU
(gelu_and_mul, exact) or GELU_TANH (gelu_tanh_and_mul, the tanh approximation).

The layout of scale's kernel (tiles.py), read twice per tile: the gate half and the up half of each
row, d elements apart; 16-byte vectors when d and the row strides are multiples of 16 elements
(Triton specializes arguments divisible by 16); int64 row offsets. The tile is tuned as scale's is.
- silu(g) = g * sigmoid(g) = g / (1 + 2^(-g log2 e)): tl.exp2 is ex2.approx.f32 and fp32 division
  is div.full.f32 (2 ulp), about 2e-6 relative error in all; where 2^(-g log2 e) overflows
  (g < -88) the quotient is g / inf = -0, the limit.
- tanh GELU: 0.5 g (1 + tanh(z)) = g * sigmoid(2 z) = g / (1 + 2^(-2 z log2 e)), z = sqrt(2/pi)
  (g + 0.044715 g^3): one ex2.approx and one div.full.f32 like SiLU, about 3e-6 relative error,
  and exact limits: where the exponential overflows (g < -10) the quotient is g / inf = -0.
- exact GELU: g Phi(g), Phi the normal CDF, taken from erfc without branches (_normal_cdf): for
  z = |g| / sqrt 2, erfc(z) = t 2^(P(t) - z^2 log2 e) with t = 1 / (1 + z / 2) and P a degree-9
  polynomial fitted here (the form of Numerical Recipes' erfcc; relative error of erfc under 1.1e-7
  for every z >= 0 in exact arithmetic), and Phi = erfc / 2 for g < 0, 1 - erfc / 2 otherwise.
  In float32 arithmetic (ex2.approx, div.full): Phi within 2.3e-7 absolute everywhere, 1.2e-6
  relative for g > -3 and 8e-6 down to g = -9 (the float32 reference's 0.5 (1 + erf) is off by
  up to 22% relative between g = -5 and -3; all far inside every tolerance). It replaces
  libdevice's erff, whose two polynomial branches diverge within a warp: with bf16 data an
  exact-GELU kernel issues about as many instructions as the memory system moves bytes, and at
  32768x8192 the erff kernels (ours, Inductor's) reached 87% of the copy bandwidth on an H200.
  One ex2, one division and ten FMAs an element now.
"""

import torch
import triton
import triton.language as tl

from .tiles import Tiles, tuning_configs  # noqa: F401 (the solutions re-export it for tests)

SILU, GELU, GELU_TANH = 0, 1, 2
NAMES = {SILU: "silu_and_mul", GELU: "gelu_and_mul", GELU_TANH: "gelu_tanh_and_mul"}
# Kernels may read only constexpr globals.
_TWO_Z_LINEAR = tl.constexpr(2 * 0.7978845608028654 * 1.4426950408889634)  # 2 sqrt(2/pi) log2 e
_TWO_Z_CUBIC = tl.constexpr(2 * 0.7978845608028654 * 0.044715 * 1.4426950408889634)
_SQRT_HALF = tl.constexpr(0.7071067811865476)
_LOG2E = tl.constexpr(1.4426950408889634)


@triton.jit
def _normal_cdf(g):
    """Phi(g) = erfc(-g / sqrt 2) / 2 in float32, branch-free (see the module docstring)."""
    z = tl.abs(g) * _SQRT_HALF
    t = 1.0 / (1.0 + 0.5 * z)
    # P(t) = log2(erfc(z) / t) + z^2 log2 e, Horner from the degree-9 coefficient.
    p = 0.24346851 * t - 1.1733749
    p = p * t + 2.1254525
    p = p * t - 1.6174033
    p = p * t + 0.39147764
    p = p * t - 0.26540717
    p = p * t + 0.13905863
    p = p * t + 0.5397484
    p = p * t + 1.4427277
    p = p * t - 1.8257482
    half_erfc = 0.5 * t * tl.exp2(p - z * z * _LOG2E)  # underflows to 0 past |g| of about 14
    return tl.where(g < 0.0, half_erfc, 1.0 - half_erfc)


# rows only bounds the mask: specializing on it (== 1, divisible by 16) would only add compiles.
@triton.jit(do_not_specialize=["rows", "tune_tag"])
def _gated_kernel(
    x_ptr,
    out_ptr,
    rows,
    d,
    x_row_stride,
    out_row_stride,
    tune_tag,  # never read: names the tuner in its tuning key (see tuning.py)
    ACT: tl.constexpr,
    BLOCK_ROWS: tl.constexpr,
    BLOCK_COLS: tl.constexpr,
    EVICT_FIRST: tl.constexpr,
):
    row = tl.program_id(0).to(tl.int64) * BLOCK_ROWS + tl.arange(0, BLOCK_ROWS).to(tl.int64)
    col = tl.program_id(1) * BLOCK_COLS + tl.arange(0, BLOCK_COLS)
    mask = (row[:, None] < rows) & (col[None, :] < d)
    gate_ptr = x_ptr + row[:, None] * x_row_stride + col[None, :]
    if EVICT_FIRST:
        gate = tl.load(gate_ptr, mask=mask, other=0.0, eviction_policy="evict_first")
        up = tl.load(gate_ptr + d, mask=mask, other=0.0, eviction_policy="evict_first")
    else:
        gate = tl.load(gate_ptr, mask=mask, other=0.0)
        up = tl.load(gate_ptr + d, mask=mask, other=0.0)
    gate = gate.to(tl.float32)
    if ACT == 0:  # SILU (kernels may not read the module's ints)
        act = gate / (1.0 + tl.exp2(gate * -_LOG2E))
    elif ACT == 2:  # GELU_TANH
        two_z_log2e = gate * (_TWO_Z_LINEAR + _TWO_Z_CUBIC * gate * gate)
        act = gate / (1.0 + tl.exp2(-two_z_log2e))
    else:  # GELU
        act = gate * _normal_cdf(gate)
    out = act * up.to(tl.float32)
    out_offsets = row[:, None] * out_row_stride + col[None, :]
    tl.store(out_ptr + out_offsets, out.to(out_ptr.dtype.element_ty), mask=mask)


# Output-sized streams: x (twice as wide) and out. The tuning key adds the width, the activation,
# the tuner's tag and the dtypes.
PLANS = Tiles(_gated_kernel, ["d", "ACT"], streams=3)


def launch(x: torch.Tensor, out: torch.Tensor, act: int, config: triton.Config | None) -> None:
    """``config``: that plan, untuned; None: the tuned plan (or the fixed one for small calls)."""
    name = NAMES[act]
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
    args = (x, out, rows, d, x.stride(0), out.stride(0))
    PLANS.launch(x, args, rows, d, config, ACT=act)
