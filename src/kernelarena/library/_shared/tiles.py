"""The launch plans of the Triton element-wise kernels over rows (scale, the gated activations): a
program owns a [BLOCK_ROWS, BLOCK_COLS] tile of the output, BLOCK_ROWS whole rows or part of one
row for wide rows.

The tile (elements and warps per program) is tuned on the device (tuning.py) the first time a
(width, row-count bucket, dtype) is seen, over 6 candidates of 8 and 16 elements a thread:
Inductor's pointwise plan (1024 elements, 4 warps: one 16-byte vector of bf16 a thread), Liger's
(a row of 2048 at 8 warps), and the earlier fixed plan (4096 elements, 8 warps, evict-first loads)
among them. Plain loads are the default: on an H200 every kernel here that streamed its input with
evict-first (scale's, and its CUDA twin with ld.global.cs) reached 87-91% of the copy bandwidth at
32768x8192 where torch's plain-load kernel reached 99%, and silu_and_mul trailed the plain-load
peers by 8%. Calls under TUNE_MIN_ELEMENTS outputs and the interpreter take a fixed plan, which
shrinks tiles until every SM gets two programs.

A kernel takes the output's ``rows`` and the key width argument, the constexprs BLOCK_ROWS,
BLOCK_COLS and EVICT_FIRST, and a ``tune_tag``.
"""

import torch
import triton

from . import tuning

TILE = 4096  # fixed plan: output elements per program at large sizes
MIN_TILE = 512  # fixed plan: smallest tile when shrinking for small shapes
# (output elements per program, warps, evict-first loads): the tuning candidates.
TUNED_TILES = (
    (512, 2, False),
    (1024, 4, False),
    (2048, 8, False),
    (2048, 4, False),
    (4096, 8, False),
    (4096, 8, True),
)
TUNE_MIN_ELEMENTS = 1 << 18  # outputs; smaller calls take the fixed plan


def config(block_rows: int, block_cols: int, num_warps: int, evict_first: bool) -> triton.Config:
    kwargs = {"BLOCK_ROWS": block_rows, "BLOCK_COLS": block_cols, "EVICT_FIRST": evict_first}
    return triton.Config(kwargs, num_warps=num_warps, num_stages=1)


def fixed_config(rows: int, cols: int, device: torch.device) -> triton.Config:
    """The untuned plan for ``rows`` rows of ``cols`` outputs."""
    block_cols = min(triton.next_power_of_2(cols), TILE)
    block_rows = min(TILE // block_cols, triton.next_power_of_2(rows))
    # Two programs per SM at least; under the interpreter (CPU) fewer programs run faster.
    wanted = 2 * tuning.multiprocessors(device.index or 0) if device.type == "cuda" else 1
    while (
        block_rows * block_cols > MIN_TILE
        and triton.cdiv(rows, block_rows) * triton.cdiv(cols, block_cols) < wanted
    ):
        if block_rows > 1:
            block_rows //= 2
        else:
            block_cols //= 2
    # 8 elements a thread (one 16-byte vector of bf16), 8 warps at most: 16 at full tiles.
    num_warps = max(1, min(8, block_rows * block_cols // 256))
    return config(block_rows, block_cols, num_warps, False)


def tuning_configs(rows: int, cols: int) -> list[triton.Config]:
    """The candidates tuned for ``rows`` rows of ``cols`` outputs; tiles larger than the
    (bucketed) call are left out."""
    cols_block = triton.next_power_of_2(cols)
    configs = []
    for tile, warps, evict_first in TUNED_TILES:
        block_cols = min(tile, cols_block)
        block_rows = tile // block_cols
        if block_rows <= tuning.rows_bucket(rows):
            configs.append(config(block_rows, block_cols, warps, evict_first))
    return configs or [config(1, min(cols_block, TILE), 4, False)]


class Tiles:
    """One kernel's tuners. ``key``: its width argument (and any constexpr that picks its math);
    ``streams``: output-sized tensors a call reads and writes, for the warm-or-cold choice."""

    def __init__(self, kernel, key: list[str], streams: int) -> None:
        self.kernel = kernel
        self.streams = streams
        self.tuners = tuning.Tuners(
            kernel, key, lambda cols_block, rows_bucket: tuning_configs(rows_bucket, cols_block)
        )

    def launch(self, x, args: tuple, rows: int, cols: int, config, **constexprs) -> None:
        """``config``: that plan, untuned; None: the tuned plan (or the fixed one for small
        calls and under the interpreter)."""
        if rows == 0 or cols == 0:
            return
        small = not tuning.tunes(x) or rows * cols < TUNE_MIN_ELEMENTS
        if config is None and small:
            config = fixed_config(rows, cols, x.device)
        if config is not None:
            meta = config.kwargs
            grid = (triton.cdiv(rows, meta["BLOCK_ROWS"]), triton.cdiv(cols, meta["BLOCK_COLS"]))
            self.kernel[grid](*args, tune_tag=0, **constexprs, **config.all_kwargs())
            return
        warm = self.streams * rows * cols * x.element_size() < tuning.WARM_TUNE_MAX_BYTES
        bucket = (triton.next_power_of_2(cols), tuning.rows_bucket(rows), warm)
        grid = lambda m: (triton.cdiv(rows, m["BLOCK_ROWS"]), triton.cdiv(cols, m["BLOCK_COLS"]))  # noqa: E731
        tag = tuning.tune_tag(x.device, *bucket)
        self.tuners(*bucket)[grid](*args, tune_tag=tag, **constexprs)
