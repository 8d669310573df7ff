"""linear_act in Triton: out = act(x @ weight^T + bias) as one persistent matmul.

One program per SM walks the output tiles in grouped order; each tile accumulates in fp32, then
the epilogue adds the bias, applies the activation and casts, so the activation costs no extra
pass over the output. On Hopper x and weight tiles arrive by TMA (host-built TensorDescriptors)
and the output leaves by TMA in two half-width stores (less shared memory for the epilogue, one
more pipeline stage for the main loop). Where a tensor breaks TMA's rules (base or row stride not
a multiple of 16 bytes) or the GPU predates Hopper, that tensor goes through masked pointer
loads or stores instead: same kernel, a constexpr switch. The CPU interpreter runs the same code
paths at small tiles.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass, replace

import torch
import triton
import triton.language as tl
from triton.runtime.errors import OutOfResources
from triton.tools.tensor_descriptor import TensorDescriptor

_SQRT_2_OVER_PI = tl.constexpr(0.7978845608028654)
_SQRT_HALF = tl.constexpr(0.7071067811865476)
_MINUS_LOG2E = tl.constexpr(-1.4426950408889634)
_MINUS_2_LOG2E = tl.constexpr(-2.8853900817779268)


@triton.jit
def _tile_coordinates(tile_id, num_pid_m, num_pid_n, GROUP_M: tl.constexpr):
    # Grouped order: consecutive tiles sweep GROUP_M row panels of x against one band of weight
    # columns, so a wave of 132 programs reuses its panels from L2 (50 MB on H100, 60 on H200).
    tiles_per_group = GROUP_M * num_pid_n
    first_pid_m = (tile_id // tiles_per_group) * GROUP_M
    group_rows = tl.minimum(num_pid_m - first_pid_m, GROUP_M)
    local = tile_id % tiles_per_group
    return first_pid_m + local % group_rows, local // group_rows


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
def _round_to_bf16(y):
    # fp32 -> bf16 rounding to nearest even by hand (interpreter only, see INTERPRETER_BF16).
    bits = y.to(tl.uint32, bitcast=True)
    bits += 0x7FFF + ((bits >> 16) & 1)
    return (bits >> 16).to(tl.uint16).to(tl.bfloat16, bitcast=True)


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
    return _round_to_bf16(y) if INTERPRETER_BF16 else y.to(bias_ptr.dtype.element_ty)


@triton.jit
def _load_tile(
    base, row0, col0, rows, cols, row_stride, BLOCK_R: tl.constexpr, BLOCK_C: tl.constexpr
):
    r = row0 + tl.arange(0, BLOCK_R)
    c = col0 + tl.arange(0, BLOCK_C)
    mask = (r[:, None] < rows) & (c[None, :] < cols)
    return tl.load(base + r.to(tl.int64)[:, None] * row_stride + c[None, :], mask=mask, other=0.0)


@triton.jit(do_not_specialize=["M", "N", "K"])
def _linear_act_kernel(
    x_src,  # TensorDescriptor [M, K] if LOAD_TMA else pointer
    w_src,  # TensorDescriptor [N, K] if LOAD_TMA else pointer
    out_dst,  # TensorDescriptor [M, N] (half-width blocks if EPILOGUE_SUBTILE) if STORE_TMA else pointer
    bias_ptr,
    M,
    N,
    K,
    stride_xm,
    stride_wn,
    stride_om,
    ACTIVATION: tl.constexpr,
    LOAD_TMA: tl.constexpr,
    STORE_TMA: tl.constexpr,
    EPILOGUE_SUBTILE: tl.constexpr,
    INTERPRETER_BF16: tl.constexpr,
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
    BLOCK_K: tl.constexpr,
    GROUP_M: tl.constexpr,
    NUM_PROGRAMS: tl.constexpr,
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
        acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
        for ki in range(k_tiles):
            off_k = ki * BLOCK_K
            if LOAD_TMA:
                # Out-of-range rows and the K tail arrive as zeros.
                a = x_src.load([off_m, off_k])
                b = w_src.load([off_n, off_k])
            else:
                a = _load_tile(x_src, off_m, off_k, M, K, stride_xm, BLOCK_M, BLOCK_K)
                b = _load_tile(w_src, off_n, off_k, N, K, stride_wn, BLOCK_N, BLOCK_K)
            if INTERPRETER_BF16:
                a = a.to(tl.float32)
                b = b.to(tl.float32)
            acc = tl.dot(a, b.T, acc)

        epilogue_tile += NUM_PROGRAMS
        pid_m, pid_n = _tile_coordinates(epilogue_tile, num_pid_m, num_pid_n, GROUP_M)
        off_m = pid_m * BLOCK_M
        off_n = pid_n * BLOCK_N
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


# H100/H200 (sm_90, 227 KB of shared memory per block): 128x256x64 tiles with two warpgroups,
# each holding a 64x256 fp32 accumulator (128 registers a thread). Four stages of x and weight
# tiles take 4 * 48 KB = 192 KB, plus 32 KB for one half-width output tile.
HOPPER_LARGE = Config(128, 256, 64, 8, 8, 4, True)
# Shapes with fewer 128x256 tiles than SMs (few rows, or few features): smaller tiles, more of them.
HOPPER_SMALL = Config(64, 128, 64, 8, 4, 4, False)
PRE_HOPPER = Config(128, 128, 32, 8, 4, 3, False)
# The interpreter: small tiles so that odd sizes hit every tail, several tiles per program.
INTERPRETER = Config(32, 32, 32, 2, 4, 1, True)
INTERPRETER_PROGRAMS = 3

# Configs that ran out of shared memory, replaced by the next smaller stage count.
_FITTED: dict[tuple[Config, bool, bool, torch.dtype], Config] = {}


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


def _operands(x, weight, out, config: Config, load_tma: bool, store_tma: bool, subtile: bool):
    """What the kernel reads and writes: TMA descriptors over x and weight where ``load_tma``, over
    out where ``store_tma`` (half-width blocks where ``subtile``), else the tensors themselves."""
    (m, k), n = x.shape, weight.shape[0]
    bm, bn, bk = config.block_m, config.block_n, config.block_k
    if load_tma:
        x_src = TensorDescriptor(x, [m, k], [x.stride(0), 1], [bm, bk])
        w_src = TensorDescriptor(weight, [n, k], [weight.stride(0), 1], [bn, bk])
    else:
        x_src, w_src = x, weight
    if store_tma:
        out_dst = TensorDescriptor(
            out, [m, n], [out.stride(0), 1], [bm, bn // 2 if subtile else bn]
        )
    else:
        out_dst = out
    return x_src, w_src, out_dst


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
    m, k = x.shape
    n = weight.shape[0]
    if m == 0 or n == 0:
        return
    on_gpu = x.device.type == "cuda"
    config = config or choose_config(m, n, x.device)
    hopper = not on_gpu or torch.cuda.get_device_capability(x.device)[0] >= 9
    load_tma = hopper and k > 0 and _tma_ready(x) and _tma_ready(weight)
    store_tma = hopper and _tma_ready(out)
    key = (config, load_tma, store_tma, x.dtype)
    config = _FITTED.get(key, config)

    bm, bn, bk = config.block_m, config.block_n, config.block_k
    subtile = config.epilogue_subtile and store_tma
    x_src, w_src, out_dst = _operands(x, weight, out, config, load_tma, store_tma, subtile)
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
        _linear_act_kernel[(min(programs, tiles),)](
            x_src, w_src, out_dst, bias, m, n, k,
            x.stride(0), weight.stride(0), out.stride(0),
            ACTIVATION=activation, LOAD_TMA=load_tma, STORE_TMA=store_tma,
            EPILOGUE_SUBTILE=subtile, INTERPRETER_BF16=interpreter_bf16, BLOCK_M=bm, BLOCK_N=bn, BLOCK_K=bk,
            GROUP_M=config.group_m, NUM_PROGRAMS=programs,
            num_warps=config.num_warps, num_stages=config.num_stages,
        )  # fmt: skip
    except OutOfResources:
        # Shared memory is counted at compile time; the 4-stage config is within a few KB of
        # the 227 KB limit, so retry once with one stage fewer and remember the fit.
        if config.num_stages <= 2:
            raise
        _FITTED[key] = replace(config, num_stages=config.num_stages - 1)
        linear_act(x, weight, bias, out, activation, _FITTED[key])


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
