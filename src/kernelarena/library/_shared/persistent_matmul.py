"""The persistent matmuls' common parts (linear_act and gated_mlp in Triton): out[m, n] from x [m, k]
against weights in nn.Linear layout ([n, k]), fp32 accumulation, one output tile at a time.

- Device side: the grouped tile order (``tile_offsets``), masked pointer loads and stores for
  tensors TMA cannot take (``load_tile``, ``store_tile``) and the interpreter's fp32 -> bf16
  rounding (``round_to_bf16``). The kernels keep their own main loops and epilogues.
- Host side: the tile configs (``Config``, ``Configs.choose``) and the launch plan (``plan``): which
  operands go through TMA, how many persistent programs, the options every launch passes, and the
  retry with one stage fewer where a config runs out of shared memory (``Plan.refit``).
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any

import torch
import triton
import triton.language as tl
from triton.tools.tensor_descriptor import TensorDescriptor


@triton.jit
def tile_offsets(
    tile_id,
    num_pid_m,
    num_pid_n,
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
    GROUP_M: tl.constexpr,
):
    # Grouped order: consecutive tiles sweep GROUP_M row panels of x against one band of weight
    # rows, so a wave of programs reuses its panels from L2 (50 MB on H100, 60 on H200).
    tiles_per_group = GROUP_M * num_pid_n
    first_pid_m = (tile_id // tiles_per_group) * GROUP_M
    group_rows = tl.minimum(num_pid_m - first_pid_m, GROUP_M)
    local = tile_id % tiles_per_group
    return (first_pid_m + local % group_rows) * BLOCK_M, (local // group_rows) * BLOCK_N


@triton.jit
def round_to_bf16(y):
    # fp32 -> bf16 rounding to nearest even by hand (interpreter only, see INTERPRETER_BF16).
    bits = y.to(tl.uint32, bitcast=True)
    bits += 0x7FFF + ((bits >> 16) & 1)
    return (bits >> 16).to(tl.uint16).to(tl.bfloat16, bitcast=True)


@triton.jit
def load_tile(
    base, row0, col0, rows, cols, row_stride, BLOCK_R: tl.constexpr, BLOCK_C: tl.constexpr
):
    r = row0 + tl.arange(0, BLOCK_R)
    c = col0 + tl.arange(0, BLOCK_C)
    mask = (r[:, None] < rows) & (c[None, :] < cols)
    return tl.load(base + r.to(tl.int64)[:, None] * row_stride + c[None, :], mask=mask, other=0.0)


@triton.jit
def store_tile(
    base, tile, row0, col0, rows, cols, row_stride, BLOCK_R: tl.constexpr, BLOCK_C: tl.constexpr
):
    r = row0 + tl.arange(0, BLOCK_R)
    c = col0 + tl.arange(0, BLOCK_C)
    pointers = base + r.to(tl.int64)[:, None] * row_stride + c[None, :]
    tl.store(pointers, tile, mask=(r[:, None] < rows) & (c[None, :] < cols))


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


# The interpreter: small tiles so that odd sizes hit every tail, several tiles per program.
INTERPRETER = Config(32, 32, 32, 2, 4, 1, True)
INTERPRETER_PROGRAMS = 3


@functools.cache
def multiprocessors(index: int) -> int:
    return torch.cuda.get_device_properties(index).multi_processor_count


def tma_ready(t: torch.Tensor) -> bool:
    """TMA's rules: 16-byte aligned base, row stride a multiple of 16 bytes, unit last stride."""
    size = t.element_size()
    return t.stride(-1) == 1 and t.data_ptr() % 16 == 0 and (t.stride(0) * size) % 16 == 0


@dataclass(frozen=True)
class Configs:
    """One operator's tiles: ``large`` on Hopper where its tiles are at least as many as the SMs,
    else ``small``; ``pre_hopper`` before sm_90; INTERPRETER on the CPU."""

    large: Config
    small: Config
    pre_hopper: Config

    def choose(self, m: int, n: int, device: torch.device) -> Config:
        if device.type != "cuda":
            return INTERPRETER
        if torch.cuda.get_device_capability(device)[0] < 9:
            return self.pre_hopper
        tiles = triton.cdiv(m, self.large.block_m) * triton.cdiv(n, self.large.block_n)
        return self.large if tiles >= multiprocessors(device.index or 0) else self.small


# Configs that ran out of shared memory, replaced by the next smaller stage count (one dict per
# operator: the same config holds more tiles in one kernel than in another).
Fitted = dict[tuple[Config, bool, bool, torch.dtype], Config]


@dataclass(frozen=True)
class Plan:
    """How one call launches: its config, which operands go through TMA, the grid."""

    config: Config
    load_tma: bool
    store_tma: bool
    subtile: bool  # the output leaves in two half-width TMA stores
    interpreter_bf16: bool
    programs: int
    grid: tuple[int]
    fitted: Fitted
    key: tuple[Config, bool, bool, torch.dtype]

    def launch_options(self) -> dict[str, Any]:
        """The constexprs and launch options every persistent matmul launch takes."""
        c = self.config
        return dict(
            LOAD_TMA=self.load_tma, STORE_TMA=self.store_tma, EPILOGUE_SUBTILE=self.subtile,
            INTERPRETER_BF16=self.interpreter_bf16, BLOCK_M=c.block_m, BLOCK_N=c.block_n,
            BLOCK_K=c.block_k, GROUP_M=c.group_m, NUM_PROGRAMS=self.programs,
            num_warps=c.num_warps, num_stages=c.num_stages,
        )  # fmt: skip

    def refit(self, error: Exception) -> Config:
        """After ``error`` (OutOfResources: shared memory is counted at compile time): the config
        with one stage fewer, remembered for this key; ``error`` again at two stages."""
        if self.config.num_stages <= 2:
            raise error
        self.fitted[self.key] = replace(self.config, num_stages=self.config.num_stages - 1)
        return self.fitted[self.key]

    def operands(
        self, x: torch.Tensor, weights: Sequence[torch.Tensor], out: torch.Tensor
    ) -> tuple[Any, ...]:
        """What the kernel reads and writes: TMA descriptors over x and the weights where
        ``load_tma``, over out where ``store_tma`` (half-width blocks where ``subtile``), else the
        tensors themselves; (x, *weights, out) in that order."""
        (m, k), n = x.shape, out.shape[1]
        bm, bn, bk = self.config.block_m, self.config.block_n, self.config.block_k
        sources: list[Any] = [x, *weights]
        if self.load_tma:
            sources = [TensorDescriptor(x, [m, k], [x.stride(0), 1], [bm, bk])] + [
                TensorDescriptor(w, [n, k], [w.stride(0), 1], [bn, bk]) for w in weights
            ]
        if self.store_tma:
            block = [bm, bn // 2 if self.subtile else bn]
            return (*sources, TensorDescriptor(out, [m, n], [out.stride(0), 1], block))
        return (*sources, out)


def plan(
    x: torch.Tensor,
    weights: Sequence[torch.Tensor],
    out: torch.Tensor,
    configs: Configs,
    fitted: Fitted,
    config: Config | None = None,
) -> Plan:
    """The launch of out = f(x @ w^T for w in weights) (shapes checked, m and n above 0): ``config``
    where given (tuning), else ``configs``' choice, either replaced by its fit in ``fitted``."""
    (m, k), n = x.shape, out.shape[1]
    on_gpu = x.device.type == "cuda"
    config = config or configs.choose(m, n, x.device)
    hopper = not on_gpu or torch.cuda.get_device_capability(x.device)[0] >= 9
    load_tma = hopper and k > 0 and tma_ready(x) and all(tma_ready(w) for w in weights)
    store_tma = hopper and tma_ready(out)
    key = (config, load_tma, store_tma, x.dtype)
    config = fitted.get(key, config)
    if on_gpu:
        programs = config.programs_per_sm * multiprocessors(x.device.index or 0)
    else:
        programs = INTERPRETER_PROGRAMS
    tiles = triton.cdiv(m, config.block_m) * triton.cdiv(n, config.block_n)
    return Plan(
        config=config,
        load_tma=load_tma,
        store_tma=store_tma,
        subtile=config.epilogue_subtile and store_tma,
        # Triton's interpreter (3.7) keeps bf16 as raw 16-bit patterns: its tl.dot multiplies those
        # (triton-lang/triton#11584) and its fp32 -> bf16 cast truncates. There, bf16 tiles are
        # upcast before the dot (the same exact fp32 products the tensor cores form) and the result
        # is rounded to nearest by hand, so the interpreter computes what the GPU does.
        interpreter_bf16=not on_gpu and x.dtype == torch.bfloat16,
        programs=programs,
        grid=(min(programs, tiles),),
        fitted=fitted,
        key=key,
    )
