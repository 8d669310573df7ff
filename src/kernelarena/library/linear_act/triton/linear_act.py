"""linear_act in Triton: out = act(x @ weight^T + bias) as one persistent matmul.

One program per SM walks the output tiles in grouped order; each tile accumulates in fp32, then
the epilogue adds the bias, applies the activation and casts, so the activation costs no extra
pass over the output. On Hopper x and weight tiles arrive by TMA (host-built TensorDescriptors)
and the output leaves by TMA in two half-width stores (less shared memory for the epilogue, one
more pipeline stage for the main loop). Where a tensor breaks TMA's rules (base or row stride not
a multiple of 16 bytes) or the GPU predates Hopper, that tensor goes through masked pointer
loads or stores instead: same kernel, a constexpr switch. The CPU interpreter runs the same code
paths at small tiles. The tile order, the pointer paths, the configs and the launch plan are
gated_mlp's too (persistent_matmul.py in library/_shared/).
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl
from triton.runtime.errors import OutOfResources

from ._shared.persistent_matmul import (
    Config,
    Configs,
    Fitted,
    load_tile,
    plan,
    round_to_bf16,
    store_tile,
    tile_offsets,
)

_SQRT_2_OVER_PI = tl.constexpr(0.7978845608028654)
_SQRT_HALF = tl.constexpr(0.7071067811865476)
_MINUS_LOG2E = tl.constexpr(-1.4426950408889634)
_MINUS_2_LOG2E = tl.constexpr(-2.8853900817779268)


@triton.jit
def _activate(y, ACTIVATION: tl.constexpr):
    if ACTIVATION == "gelu_tanh":
        # 0.5 y (1 + tanh(u)) == y * sigmoid(2u): one exp2, no cancellation near tanh = -1, and
        # exp2 overflowing to inf gives the right limit (-0) for very negative y.
        # (Tensors lead in products with constexprs: the interpreter needs that order.)
        u = (y + 0.044715 * y * y * y) * _SQRT_2_OVER_PI
        y = y / (1.0 + tl.exp2(u * _MINUS_2_LOG2E))
    elif ACTIVATION == "gelu":
        y = 0.5 * y * (1.0 + tl.erf(y * _SQRT_HALF))
    elif ACTIVATION == "silu":
        y = y / (1.0 + tl.exp2(y * _MINUS_LOG2E))
    elif ACTIVATION == "relu":
        y = tl.maximum(y, 0.0)
    else:
        tl.static_assert(ACTIVATION == "none", "unknown activation")
    return y


@triton.jit
def _epilogue(
    acc,
    bias_ptr,
    off_n,
    N,
    ACTIVATION: tl.constexpr,
    INTERPRETER_BF16: tl.constexpr,
    WIDTH: tl.constexpr,
):
    """fp32 accumulator columns [off_n, off_n + WIDTH) -> act(acc + bias), in the output dtype."""
    cols = off_n + tl.arange(0, WIDTH)
    bias = tl.load(bias_ptr + cols, mask=cols < N, other=0.0).to(tl.float32)
    y = _activate(acc + bias[None, :], ACTIVATION)
    return round_to_bf16(y) if INTERPRETER_BF16 else y.to(bias_ptr.dtype.element_ty)


@triton.jit(do_not_specialize=["M", "N", "K"])
def _linear_act_kernel(
    # TensorDescriptors if LOAD_TMA (x [M, K], w [N, K]) else pointers; out [M, N] (half-width
    # blocks if EPILOGUE_SUBTILE) a TensorDescriptor if STORE_TMA else a pointer
    x_src, w_src, out_dst, bias_ptr,
    M, N, K, stride_xm, stride_wn, stride_om,
    ACTIVATION: tl.constexpr,
    LOAD_TMA: tl.constexpr, STORE_TMA: tl.constexpr, EPILOGUE_SUBTILE: tl.constexpr,
    INTERPRETER_BF16: tl.constexpr,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, GROUP_M: tl.constexpr,
    NUM_PROGRAMS: tl.constexpr,
):  # fmt: skip
    start = tl.program_id(0)
    num_pid_m = tl.cdiv(M, BLOCK_M)
    num_pid_n = tl.cdiv(N, BLOCK_N)
    num_tiles = num_pid_m * num_pid_n
    k_tiles = tl.cdiv(K, BLOCK_K)
    # The epilogue keeps its own tile counter: with the loops flattened and software-pipelined,
    # the next tile's loads are issued before this tile's epilogue runs.
    epilogue_tile = start - NUM_PROGRAMS
    for tile in tl.range(start, num_tiles, NUM_PROGRAMS, flatten=True):
        off_m, off_n = tile_offsets(tile, num_pid_m, num_pid_n, BLOCK_M, BLOCK_N, GROUP_M)
        acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
        for ki in range(k_tiles):
            off_k = ki * BLOCK_K
            if LOAD_TMA:
                # Out-of-range rows and the K tail arrive as zeros.
                a = x_src.load([off_m, off_k])
                b = w_src.load([off_n, off_k])
            else:
                a = load_tile(x_src, off_m, off_k, M, K, stride_xm, BLOCK_M, BLOCK_K)
                b = load_tile(w_src, off_n, off_k, N, K, stride_wn, BLOCK_N, BLOCK_K)
            if INTERPRETER_BF16:
                a = a.to(tl.float32)
                b = b.to(tl.float32)
            acc = tl.dot(a, b.T, acc)

        epilogue_tile += NUM_PROGRAMS
        off_m, off_n = tile_offsets(epilogue_tile, num_pid_m, num_pid_n, BLOCK_M, BLOCK_N, GROUP_M)
        if STORE_TMA and EPILOGUE_SUBTILE:
            # Two half-width passes: half the shared memory for the store, and half the epilogue's
            # temporaries live at once next to the 128 accumulator registers.
            halves = tl.permute(tl.reshape(acc, (BLOCK_M, 2, BLOCK_N // 2)), (0, 2, 1))
            left, right = tl.split(halves)
            left = _epilogue(left, bias_ptr, off_n, N, ACTIVATION, INTERPRETER_BF16, BLOCK_N // 2)
            out_dst.store([off_m, off_n], left)
            right = _epilogue(
                right, bias_ptr, off_n + BLOCK_N // 2, N, ACTIVATION, INTERPRETER_BF16, BLOCK_N // 2
            )
            out_dst.store([off_m, off_n + BLOCK_N // 2], right)
        else:
            result = _epilogue(acc, bias_ptr, off_n, N, ACTIVATION, INTERPRETER_BF16, BLOCK_N)
            if STORE_TMA:
                out_dst.store([off_m, off_n], result)  # TMA clips what lies past the end of out
            else:
                store_tile(out_dst, result, off_m, off_n, M, N, stride_om, BLOCK_M, BLOCK_N)


# H100/H200 (sm_90, 227 KB of shared memory per block): 128x256x64 tiles with two warpgroups,
# each holding a 64x256 fp32 accumulator (128 registers a thread). Four stages of x and weight
# tiles take 4 * 48 KB = 192 KB, plus 32 KB for one half-width output tile.
HOPPER_LARGE = Config(128, 256, 64, 8, 8, 4, True)
# Shapes with fewer 128x256 tiles than SMs (few rows, or few features): smaller tiles, more of them.
HOPPER_SMALL = Config(64, 128, 64, 8, 4, 4, False)
PRE_HOPPER = Config(128, 128, 32, 8, 4, 3, False)
CONFIGS = Configs(HOPPER_LARGE, HOPPER_SMALL, PRE_HOPPER)

_FITTED: Fitted = {}


def _check(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor, out: torch.Tensor) -> None:
    if x.dim() != 2 or weight.dim() != 2 or bias.dim() != 1 or out.dim() != 2:
        raise ValueError("linear_act: x [m, k], weight [n, k], bias [n], out [m, n]")
    m, k = x.shape
    n = weight.shape[0]
    if weight.shape[1] != k or bias.shape[0] != n or tuple(out.shape) != (m, n):
        raise ValueError(
            f"linear_act: shapes x {tuple(x.shape)}, weight {tuple(weight.shape)}, "
            f"bias {tuple(bias.shape)}, out {tuple(out.shape)} do not match"
        )
    if len({x.dtype, weight.dtype, bias.dtype, out.dtype}) != 1 or x.dtype not in (
        torch.float16,
        torch.bfloat16,
    ):
        raise ValueError(
            "linear_act: x, weight, bias and out must share one dtype, float16 or bfloat16"
        )
    for name, t in (("x", x), ("weight", weight), ("bias", bias), ("out", out)):
        if t.numel() > 0 and t.stride(-1) != 1:
            raise ValueError(f"linear_act: the last dimension of {name} must be contiguous")


def linear_act(
    x: torch.Tensor,
    weight: torch.Tensor,
    bias: torch.Tensor,
    out: torch.Tensor,
    activation: str,
    config: Config | None = None,
) -> None:
    """Write act(x @ weight^T + bias) into out; ``config`` overrides the tile choice (tuning)."""
    _check(x, weight, bias, out)
    m, n = out.shape
    if m == 0 or n == 0:
        return
    launch = plan(x, (weight,), out, CONFIGS, _FITTED, config)
    x_src, w_src, out_dst = launch.operands(x, (weight,), out)
    try:
        _linear_act_kernel[launch.grid](
            x_src, w_src, out_dst, bias, m, n, x.shape[1],
            x.stride(0), weight.stride(0), out.stride(0),
            ACTIVATION=activation, **launch.launch_options(),
        )  # fmt: skip
    except OutOfResources as error:
        # Shared memory is counted at compile time; the 4-stage config is within a few KB of
        # the 227 KB limit, so retry once with one stage fewer and remember the fit.
        linear_act(x, weight, bias, out, activation, launch.refit(error))


def run_gelu_tanh(x, weight, bias, out):
    linear_act(x, weight, bias, out, "gelu_tanh")


def run_gelu(x, weight, bias, out):
    linear_act(x, weight, bias, out, "gelu")


def run_silu(x, weight, bias, out):
    linear_act(x, weight, bias, out, "silu")


def run_relu(x, weight, bias, out):
    linear_act(x, weight, bias, out, "relu")


def run_none(x, weight, bias, out):
    linear_act(x, weight, bias, out, "none")
