"""fused_add_rmsnorm in TileLang: residual_out = x + residual (added in float32, rounded once to the
storage dtype); out = residual_out * rsqrt(mean(residual_out^2) + eps) * weight in float32, rounded
once. Out of place: ``run`` writes out and residual_out.

One block a row, the row held in registers (one pass over memory, as the CUDA and Triton
solutions): each thread owns whole 16-byte chunks (8 bf16/fp16 or 4 fp32 values) at a stride of
the block, so with contiguous rows of a width that is a multiple of the chunk, TileLang emits
16-byte loads and stores. Rows laid out wider than ``hidden`` (a row stride), or a start not
16-byte aligned, take a kernel with the strides as arguments (element accesses). The sum of
squares is a block all-reduce (TileLang's reduce_sum). Threads a block: about two chunks a
thread, 64 to 1024, so up to 16K bf16 values a row take 2 chunks a thread and 40000 take 5.

Kernels are compiled by ``tilelang.jit`` once per (hidden, dtype, layout) on first use and kept
in TileLang's cache; ``kernel_source`` lowers one for a given target without a GPU (tests).
"""

import functools
import json

import tilelang
import tilelang.language as T
import torch

_DTYPES = {torch.float32: "float32", torch.float16: "float16", torch.bfloat16: "bfloat16"}
_CHUNK_BYTES = 16
_MIN_THREADS = 64
_MAX_THREADS = 1024


def _plan(hidden: int, dtype: str) -> tuple[int, int, int]:
    """(values a chunk, threads a block, chunks a thread) for rows of ``hidden`` values."""
    vec = _CHUNK_BYTES // (4 if dtype == "float32" else 2)
    chunks = -(-hidden // vec)
    threads = _MIN_THREADS
    while threads < _MAX_THREADS and threads * 2 < chunks:
        threads *= 2
    return vec, threads, -(-chunks // threads)


def _program(hidden: int, dtype: str, strided: bool):
    vec, threads, per_thread = _plan(hidden, dtype)
    covered = per_thread * threads  # chunks the block covers, >= the row's
    even = hidden % vec == 0 and covered * vec == hidden  # no column masks
    rows = T.dynamic("rows")
    x_stride = T.dynamic("x_stride") if strided else hidden
    residual_stride = T.dynamic("residual_stride") if strided else hidden
    f32 = "float32"

    @T.prim_func
    def fused_add_rmsnorm(
        x: T.StridedTensor((rows, hidden), (x_stride, 1), dtype),
        residual: T.StridedTensor((rows, hidden), (residual_stride, 1), dtype),
        weight: T.Tensor((hidden,), dtype),
        eps: T.float32,
        out: T.Tensor((rows, hidden), dtype),
        residual_out: T.Tensor((rows, hidden), dtype),
    ):
        with T.Kernel(rows, threads=threads) as row:
            x_chunks = T.alloc_fragment((covered, vec), dtype)
            residual_chunks = T.alloc_fragment((covered, vec), dtype)
            s = T.alloc_fragment((covered, vec), f32)
            squares = T.alloc_fragment((covered, vec), f32)
            chunk_sums = T.alloc_fragment((covered,), f32)
            total = T.alloc_fragment((1,), f32)
            # Plain copies first (16-byte loads where rows allow), then the arithmetic.
            for c, v in T.Parallel(covered, vec):
                if even or c * vec + v < hidden:
                    x_chunks[c, v] = x[row, c * vec + v]
                    residual_chunks[c, v] = residual[row, c * vec + v]
                else:
                    x_chunks[c, v] = T.cast(0, dtype)
                    residual_chunks[c, v] = T.cast(0, dtype)
            for c, v in T.Parallel(covered, vec):
                added = T.cast(x_chunks[c, v], f32) + T.cast(residual_chunks[c, v], f32)
                x_chunks[c, v] = T.cast(added, dtype)  # the rounded sum, as stored
                s[c, v] = T.cast(x_chunks[c, v], f32)
            for c, v in T.Parallel(covered, vec):
                if even or c * vec + v < hidden:
                    residual_out[row, c * vec + v] = x_chunks[c, v]
            for c, v in T.Parallel(covered, vec):
                squares[c, v] = s[c, v] * s[c, v]
            T.reduce_sum(squares, chunk_sums, dim=1)
            T.reduce_sum(chunk_sums, total, dim=0)
            for c, v in T.Parallel(covered, vec):
                if even or c * vec + v < hidden:
                    rstd = T.rsqrt(total[0] / hidden + eps)
                    weighted = s[c, v] * rstd * T.cast(weight[c * vec + v], f32)
                    out[row, c * vec + v] = T.cast(weighted, dtype)

    return fused_add_rmsnorm


@functools.cache
def _kernel(hidden: int, dtype: str, strided: bool, target: str | None = None):
    compile_target = json.loads(target) if target else "auto"
    return tilelang.compile(_program(hidden, dtype, strided), target=compile_target)


def kernel_source(hidden: int, dtype: str, strided: bool, arch: str = "sm_90a") -> str:
    """The CUDA source TileLang generates for ``arch`` (lowered and compiled by nvcc; no GPU)."""
    target = json.dumps({"kind": "cuda", "arch": arch})
    return _kernel(hidden, dtype, strided, target).get_kernel_source()


def _aligned(t: torch.Tensor) -> bool:
    return t.data_ptr() % _CHUNK_BYTES == 0


def run(x, residual, weight, eps, out, residual_out):
    rows, hidden = x.shape
    if x.dtype not in _DTYPES:
        raise TypeError(f"fused_add_rmsnorm (TileLang): dtype {x.dtype} is not supported")
    if x.stride(1) != 1 or residual.stride(1) != 1 or not weight.is_contiguous():
        raise ValueError("fused_add_rmsnorm (TileLang): columns and weight must be contiguous")
    if not (out.is_contiguous() and residual_out.is_contiguous()):
        raise ValueError("fused_add_rmsnorm (TileLang): out and residual_out must be contiguous")
    if rows == 0 or hidden == 0:
        return
    tensors = (x, residual, weight, out, residual_out)
    strided = (
        x.stride(0) != hidden
        or residual.stride(0) != hidden
        or not all(_aligned(t) for t in tensors)
    )
    kernel = _kernel(hidden, _DTYPES[x.dtype], strided)
    with torch.cuda.device(x.device):
        kernel(x, residual, weight, float(eps), out, residual_out)
