"""gated_mlp in Triton: out = silu(x @ w_gate^T) * (x @ w_up^T) as one persistent matmul.

Each output tile keeps two fp32 accumulators, gate and up, fed by the same x tile: x is read once
for both projections and neither intermediate ever reaches memory. The epilogue computes
silu(gate) * up and rounds once. A 128x128 tile with two accumulators holds as many registers
(128 per thread over 8 warps) and as much shared memory per stage (x, w_gate, w_up tiles: 48 KB)
as a 128x256 single matmul. Hopper: TMA loads and half-width TMA stores; tensors that break TMA's
alignment rules, older GPUs and the CPU interpreter use masked pointer accesses in the same kernel.
The tile order, the pointer paths, the configs and the launch plan are linear_act's too
(persistent_matmul.py in library/_shared/).
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

_MINUS_LOG2E = tl.constexpr(-1.4426950408889634)


@triton.jit(do_not_specialize=["M", "N", "K"])
def _gated_mlp_kernel(
    # TensorDescriptors if LOAD_TMA (x [M, K], gate and up [N, K]) else pointers; out [M, N]
    # (half-width blocks if EPILOGUE_SUBTILE) a TensorDescriptor if STORE_TMA else a pointer
    x_src, gate_src, up_src, out_dst,
    M, N, K, stride_xm, stride_gn, stride_un, stride_om,
    LOAD_TMA: tl.constexpr, STORE_TMA: tl.constexpr, EPILOGUE_SUBTILE: tl.constexpr,
    INTERPRETER_BF16: tl.constexpr,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, GROUP_M: tl.constexpr,
    NUM_PROGRAMS: tl.constexpr, OUT_DTYPE: tl.constexpr,
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
        gate = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
        up = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
        for ki in range(k_tiles):
            off_k = ki * BLOCK_K
            if LOAD_TMA:
                # Out-of-range rows and the K tail arrive as zeros.
                a = x_src.load([off_m, off_k])
                g = gate_src.load([off_n, off_k])
                u = up_src.load([off_n, off_k])
            else:
                a = load_tile(x_src, off_m, off_k, M, K, stride_xm, BLOCK_M, BLOCK_K)
                g = load_tile(gate_src, off_n, off_k, N, K, stride_gn, BLOCK_N, BLOCK_K)
                u = load_tile(up_src, off_n, off_k, N, K, stride_un, BLOCK_N, BLOCK_K)
            if INTERPRETER_BF16:
                a = a.to(tl.float32)
                g = g.to(tl.float32)
                u = u.to(tl.float32)
            gate = tl.dot(a, g.T, gate)
            up = tl.dot(a, u.T, up)

        epilogue_tile += NUM_PROGRAMS
        off_m, off_n = tile_offsets(epilogue_tile, num_pid_m, num_pid_n, BLOCK_M, BLOCK_N, GROUP_M)
        # silu(g) = g / (1 + 2^(-g log2 e)); 2^x overflowing to inf gives the right limit, -0.
        y = gate / (1.0 + tl.exp2(gate * _MINUS_LOG2E)) * up
        result = round_to_bf16(y) if INTERPRETER_BF16 else y.to(OUT_DTYPE)
        if STORE_TMA:
            # TMA clips rows and columns past the end of out.
            if EPILOGUE_SUBTILE:
                halves = tl.permute(tl.reshape(result, (BLOCK_M, 2, BLOCK_N // 2)), (0, 2, 1))
                left, right = tl.split(halves)
                out_dst.store([off_m, off_n], left)
                out_dst.store([off_m, off_n + BLOCK_N // 2], right)
            else:
                out_dst.store([off_m, off_n], result)
        else:
            store_tile(out_dst, result, off_m, off_n, M, N, stride_om, BLOCK_M, BLOCK_N)


# H100/H200 (sm_90, 227 KB of shared memory per block): two 128x128 fp32 accumulators over two
# warpgroups; four stages of (x, w_gate, w_up) tiles are 4 * 48 KB = 192 KB, plus 16 KB for one
# half-width output tile.
HOPPER_LARGE = Config(128, 128, 64, 8, 8, 4, True)
# Fewer 128x128 tiles than SMs: half-height tiles, one warpgroup.
HOPPER_SMALL = Config(64, 128, 64, 8, 4, 4, False)
PRE_HOPPER = Config(128, 64, 32, 8, 4, 3, False)
CONFIGS = Configs(HOPPER_LARGE, HOPPER_SMALL, PRE_HOPPER)

_FITTED: Fitted = {}
_TRITON_DTYPES = {torch.float16: tl.float16, torch.bfloat16: tl.bfloat16}


def _check(x: torch.Tensor, w_gate: torch.Tensor, w_up: torch.Tensor, out: torch.Tensor) -> None:
    if x.dim() != 2 or w_gate.dim() != 2 or w_up.dim() != 2 or out.dim() != 2:
        raise ValueError("gated_mlp: x [m, k], w_gate [n, k], w_up [n, k], out [m, n]")
    m, k = x.shape
    n = w_gate.shape[0]
    if tuple(w_gate.shape) != (n, k) or tuple(w_up.shape) != (n, k) or tuple(out.shape) != (m, n):
        raise ValueError(
            f"gated_mlp: shapes x {tuple(x.shape)}, w_gate {tuple(w_gate.shape)}, "
            f"w_up {tuple(w_up.shape)}, out {tuple(out.shape)} do not match"
        )
    if len({x.dtype, w_gate.dtype, w_up.dtype, out.dtype}) != 1 or x.dtype not in _TRITON_DTYPES:
        raise ValueError(
            "gated_mlp: x, w_gate, w_up and out must share one dtype, float16 or bfloat16"
        )
    for name, t in (("x", x), ("w_gate", w_gate), ("w_up", w_up), ("out", out)):
        if t.numel() > 0 and t.stride(-1) != 1:
            raise ValueError(f"gated_mlp: the last dimension of {name} must be contiguous")


def gated_mlp(
    x: torch.Tensor,
    w_gate: torch.Tensor,
    w_up: torch.Tensor,
    out: torch.Tensor,
    config: Config | None = None,
) -> None:
    """Write silu(x @ w_gate^T) * (x @ w_up^T) into out; ``config`` overrides the tile choice."""
    _check(x, w_gate, w_up, out)
    m, n = out.shape
    if m == 0 or n == 0:
        return
    launch = plan(x, (w_gate, w_up), out, CONFIGS, _FITTED, config)
    x_src, gate_src, up_src, out_dst = launch.operands(x, (w_gate, w_up), out)
    try:
        _gated_mlp_kernel[launch.grid](
            x_src, gate_src, up_src, out_dst, m, n, x.shape[1],
            x.stride(0), w_gate.stride(0), w_up.stride(0), out.stride(0),
            OUT_DTYPE=_TRITON_DTYPES[x.dtype], **launch.launch_options(),
        )  # fmt: skip
    except OutOfResources as error:
        # Shared memory is counted at compile time; retry once with one stage fewer, remembered.
        gated_mlp(x, w_gate, w_up, out, launch.refit(error))


def run(x, w_gate, w_up, out):
    gated_mlp(x, w_gate, w_up, out)
