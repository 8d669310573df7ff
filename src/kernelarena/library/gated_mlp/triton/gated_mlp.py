"""gated_mlp in Triton: out = silu(x @ w_gate^T) * (x @ w_up^T) as one persistent matmul.

Each output tile keeps two fp32 accumulators, gate and up, fed by the same x tile: x is read once
for both projections and neither intermediate ever reaches memory. The epilogue computes
silu(gate) * up and rounds once. A 128x128 tile with two accumulators holds as many registers
(128 per thread over 8 warps) and as much shared memory per stage (x, w_gate, w_up tiles: 48 KB)
as a 128x256 single matmul. Hopper: TMA loads and half-width TMA stores; tensors that break TMA's
alignment rules, older GPUs and the CPU interpreter use masked pointer accesses in the same kernel.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass, replace

import torch
import triton
import triton.language as tl
from triton.runtime.errors import OutOfResources
from triton.tools.tensor_descriptor import TensorDescriptor

_MINUS_LOG2E = tl.constexpr(-1.4426950408889634)


@triton.jit
def _tile_coordinates(tile_id, num_pid_m, num_pid_n, GROUP_M: tl.constexpr):
    # Grouped order: consecutive tiles sweep GROUP_M row panels of x against one band of weight
    # rows, so a wave of programs reuses its panels from L2 (50 MB on H100, 60 on H200).
    tiles_per_group = GROUP_M * num_pid_n
    first_pid_m = (tile_id // tiles_per_group) * GROUP_M
    group_rows = tl.minimum(num_pid_m - first_pid_m, GROUP_M)
    local = tile_id % tiles_per_group
    return first_pid_m + local % group_rows, local // group_rows


@triton.jit
def _round_to_bf16(y):
    # fp32 -> bf16 rounding to nearest even by hand (interpreter only, see INTERPRETER_BF16).
    bits = y.to(tl.uint32, bitcast=True)
    bits += 0x7FFF + ((bits >> 16) & 1)
    return (bits >> 16).to(tl.uint16).to(tl.bfloat16, bitcast=True)


@triton.jit
def _load_tile(
    base, row0, col0, rows, cols, row_stride, BLOCK_R: tl.constexpr, BLOCK_C: tl.constexpr
):
    r = row0 + tl.arange(0, BLOCK_R)
    c = col0 + tl.arange(0, BLOCK_C)
    mask = (r[:, None] < rows) & (c[None, :] < cols)
    return tl.load(base + r.to(tl.int64)[:, None] * row_stride + c[None, :], mask=mask, other=0.0)


@triton.jit(do_not_specialize=["M", "N", "K"])
def _gated_mlp_kernel(
    x_src,  # TensorDescriptor [M, K] if LOAD_TMA else pointer
    gate_src,  # TensorDescriptor [N, K] if LOAD_TMA else pointer
    up_src,  # TensorDescriptor [N, K] if LOAD_TMA else pointer
    out_dst,  # TensorDescriptor [M, N] (half-width blocks if EPILOGUE_SUBTILE) if STORE_TMA else pointer
    M,
    N,
    K,
    stride_xm,
    stride_gn,
    stride_un,
    stride_om,
    LOAD_TMA: tl.constexpr,
    STORE_TMA: tl.constexpr,
    EPILOGUE_SUBTILE: tl.constexpr,
    INTERPRETER_BF16: tl.constexpr,
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
    BLOCK_K: tl.constexpr,
    GROUP_M: tl.constexpr,
    NUM_PROGRAMS: tl.constexpr,
    OUT_DTYPE: tl.constexpr,
):
    start = tl.program_id(0)
    num_pid_m = tl.cdiv(M, BLOCK_M)
    num_pid_n = tl.cdiv(N, BLOCK_N)
    num_tiles = num_pid_m * num_pid_n
    k_tiles = tl.cdiv(K, BLOCK_K)
    # The epilogue keeps its own tile counter: with the loops flattened and software-pipelined,
    # the next tile's loads are issued before this tile's epilogue runs.
    epilogue_tile = start - NUM_PROGRAMS
    for tile in tl.range(start, num_tiles, NUM_PROGRAMS, flatten=True):
        pid_m, pid_n = _tile_coordinates(tile, num_pid_m, num_pid_n, GROUP_M)
        off_m = pid_m * BLOCK_M
        off_n = pid_n * BLOCK_N
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
                a = _load_tile(x_src, off_m, off_k, M, K, stride_xm, BLOCK_M, BLOCK_K)
                g = _load_tile(gate_src, off_n, off_k, N, K, stride_gn, BLOCK_N, BLOCK_K)
                u = _load_tile(up_src, off_n, off_k, N, K, stride_un, BLOCK_N, BLOCK_K)
            if INTERPRETER_BF16:
                a = a.to(tl.float32)
                g = g.to(tl.float32)
                u = u.to(tl.float32)
            gate = tl.dot(a, g.T, gate)
            up = tl.dot(a, u.T, up)

        epilogue_tile += NUM_PROGRAMS
        pid_m, pid_n = _tile_coordinates(epilogue_tile, num_pid_m, num_pid_n, GROUP_M)
        off_m = pid_m * BLOCK_M
        off_n = pid_n * BLOCK_N
        # silu(g) = g / (1 + 2^(-g log2 e)); 2^x overflowing to inf gives the right limit, -0.
        y = gate / (1.0 + tl.exp2(gate * _MINUS_LOG2E)) * up
        result = _round_to_bf16(y) if INTERPRETER_BF16 else y.to(OUT_DTYPE)
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
            rows = off_m + tl.arange(0, BLOCK_M)
            cols = off_n + tl.arange(0, BLOCK_N)
            pointers = out_dst + rows.to(tl.int64)[:, None] * stride_om + cols[None, :]
            tl.store(pointers, result, mask=(rows[:, None] < M) & (cols[None, :] < N))


@dataclass(frozen=True)
class Config:
    block_m: int
    block_n: int
    block_k: int
    group_m: int
    num_warps: int
    num_stages: int
    epilogue_subtile: bool
    # Persistent programs per SM: 2 when two CTAs fit (shared memory, registers), so that one's
    # epilogue overlaps the other's main loop.
    programs_per_sm: int = 1


# H100/H200 (sm_90, 227 KB of shared memory per block): two 128x128 fp32 accumulators over two
# warpgroups; four stages of (x, w_gate, w_up) tiles are 4 * 48 KB = 192 KB, plus 16 KB for one
# half-width output tile.
HOPPER_LARGE = Config(128, 128, 64, 8, 8, 4, True)
# Fewer 128x128 tiles than SMs: half-height tiles, one warpgroup.
HOPPER_SMALL = Config(64, 128, 64, 8, 4, 4, False)
PRE_HOPPER = Config(128, 64, 32, 8, 4, 3, False)
# The interpreter: small tiles so that odd sizes hit every tail, several tiles per program.
INTERPRETER = Config(32, 32, 32, 2, 4, 1, True)
INTERPRETER_PROGRAMS = 3

_FITTED: dict[tuple[Config, bool, bool, torch.dtype], Config] = {}
_TRITON_DTYPES = {torch.float16: tl.float16, torch.bfloat16: tl.bfloat16}


@functools.cache
def _multiprocessors(index: int) -> int:
    return torch.cuda.get_device_properties(index).multi_processor_count


def _tma_ready(t: torch.Tensor) -> bool:
    """TMA's rules: 16-byte aligned base, row stride a multiple of 16 bytes, unit last stride."""
    size = t.element_size()
    return t.stride(-1) == 1 and t.data_ptr() % 16 == 0 and (t.stride(0) * size) % 16 == 0


def choose_config(m: int, n: int, device: torch.device) -> Config:
    if device.type != "cuda":
        return INTERPRETER
    if torch.cuda.get_device_capability(device)[0] < 9:
        return PRE_HOPPER
    tiles = triton.cdiv(m, HOPPER_LARGE.block_m) * triton.cdiv(n, HOPPER_LARGE.block_n)
    return HOPPER_LARGE if tiles >= _multiprocessors(device.index or 0) else HOPPER_SMALL


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
    m, k = x.shape
    n = w_gate.shape[0]
    if m == 0 or n == 0:
        return
    on_gpu = x.device.type == "cuda"
    config = config or choose_config(m, n, x.device)
    hopper = not on_gpu or torch.cuda.get_device_capability(x.device)[0] >= 9
    load_tma = hopper and k > 0 and _tma_ready(x) and _tma_ready(w_gate) and _tma_ready(w_up)
    store_tma = hopper and _tma_ready(out)
    key = (config, load_tma, store_tma, x.dtype)
    config = _FITTED.get(key, config)

    bm, bn, bk = config.block_m, config.block_n, config.block_k
    subtile = config.epilogue_subtile and store_tma
    if load_tma:
        x_src = TensorDescriptor(x, [m, k], [x.stride(0), 1], [bm, bk])
        gate_src = TensorDescriptor(w_gate, [n, k], [w_gate.stride(0), 1], [bn, bk])
        up_src = TensorDescriptor(w_up, [n, k], [w_up.stride(0), 1], [bn, bk])
    else:
        x_src, gate_src, up_src = x, w_gate, w_up
    if store_tma:
        out_dst = TensorDescriptor(
            out, [m, n], [out.stride(0), 1], [bm, bn // 2 if subtile else bn]
        )
    else:
        out_dst = out
    if on_gpu:
        programs = config.programs_per_sm * _multiprocessors(x.device.index or 0)
    else:
        programs = INTERPRETER_PROGRAMS
    # Triton's interpreter (3.7) keeps bf16 as raw 16-bit patterns: its tl.dot multiplies those
    # (triton-lang/triton#11584) and its fp32 -> bf16 cast truncates. There, bf16 tiles are upcast
    # before the dot (the same exact fp32 products the tensor cores form) and the result is
    # rounded to nearest by hand, so the interpreter computes what the GPU does.
    interpreter_bf16 = not on_gpu and x.dtype == torch.bfloat16
    tiles = triton.cdiv(m, bm) * triton.cdiv(n, bn)
    try:
        _gated_mlp_kernel[(min(programs, tiles),)](
            x_src, gate_src, up_src, out_dst, m, n, k,
            x.stride(0), w_gate.stride(0), w_up.stride(0), out.stride(0),
            LOAD_TMA=load_tma, STORE_TMA=store_tma, EPILOGUE_SUBTILE=subtile, INTERPRETER_BF16=interpreter_bf16,
            BLOCK_M=bm, BLOCK_N=bn, BLOCK_K=bk, GROUP_M=config.group_m, NUM_PROGRAMS=programs,
            OUT_DTYPE=_TRITON_DTYPES[x.dtype],
            num_warps=config.num_warps, num_stages=config.num_stages,
        )  # fmt: skip
    except OutOfResources:
        # Shared memory is counted at compile time; retry once with one stage fewer, remembered.
        if config.num_stages <= 2:
            raise
        _FITTED[key] = replace(config, num_stages=config.num_stages - 1)
        gated_mlp(x, w_gate, w_up, out, _FITTED[key])


def run(x, w_gate, w_up, out):
    gated_mlp(x, w_gate, w_up, out)
