"""Tuning a Triton launch plan on the device, for every library kernel that tunes one.

A ``Tuners`` holds one ``triton.autotune`` per bucket (width, row count, ..., warm): each times its
candidates the first time its tuning key is seen and keeps the pick. Timing is Triton's: CUDA events
with L2 flushed for large calls (``bench_cold``), CUDA graphs with the data in L2 for calls under
WARM_TUNE_MAX_BYTES (``bench_warm``: as the kernel sees an activation the previous kernel just
wrote). The timings are kept in Triton's cache folder (cache_results), so a later process finds the
pick there instead of timing again (0.15-0.3 s a shape). Triton's tuning key is otherwise only the
kernel's key arguments and the dtypes: the same for every row bucket, for cold and warm timing and
for two GPUs of one architecture (an H100 and an H200 are both sm_90a) sharing a cache folder. So
each kernel takes a ``tune_tag`` argument it never reads, and each tuner passes ``tune_tag``, a
31-bit CRC of the GPU's name and the tuner's bucket: picks never pass between buckets, timing modes
or GPU models. Always an int32, so every tag runs the same compiled kernel.

Tests replace ``tunes``, ``multiprocessors``, ``bench_cold`` and ``bench_warm`` here (by attribute:
every caller looks them up at call time) and a ``Tuners``' ``made``.
"""

import functools
import os
import zlib

import torch
import triton
import triton.testing

INTERPRETED = os.environ.get("TRITON_INTERPRET") == "1"
WARM_TUNE_MAX_BYTES = 16 << 20  # under this a call's data stays in the 50-60 MB L2
ROWS_BUCKET_MAX = 1 << 16  # row counts are tuned per power of two up to this


@functools.lru_cache(maxsize=16)
def multiprocessors(device_index: int) -> int:
    return torch.cuda.get_device_properties(device_index).multi_processor_count


def tunes(x: torch.Tensor) -> bool:
    """Tuning times kernels on the GPU: never under the interpreter."""
    return not INTERPRETED and x.device.type == "cuda"


def rows_bucket(rows: int) -> int:
    return min(triton.next_power_of_2(max(rows, 1)), ROWS_BUCKET_MAX)


def bench_cold(kernel_call, quantiles):
    return triton.testing.do_bench(kernel_call, warmup=5, rep=25, quantiles=quantiles)


def bench_warm(kernel_call, quantiles):
    return triton.testing.do_bench_cudagraph(kernel_call, rep=10, quantiles=quantiles)


class Tuners:
    """One autotuner of ``kernel`` per bucket ``(*plan_key, warm)``; ``configs(*plan_key)`` are its
    candidates and ``key`` the kernel arguments its tuning key adds (with ``tune_tag`` and the
    dtypes)."""

    def __init__(self, kernel, key: list[str], configs) -> None:
        self.kernel = kernel
        self.key = [*key, "tune_tag"]
        self.configs = configs
        self.made: dict[tuple, triton.runtime.Autotuner] = {}

    def __call__(self, *bucket):
        tuner = self.made.get(bucket)
        if tuner is None:
            bench = bench_warm if bucket[-1] else bench_cold
            tuner = self.made[bucket] = triton.autotune(
                configs=self.configs(*bucket[:-1]),
                key=self.key,
                do_bench=bench,
                cache_results=True,
            )(self.kernel)
        return tuner

    def plans(self) -> dict[str, str]:
        """The plans picked on this device so far, by (bucket, tuning key): for reports."""
        return {f"{k} {key}": str(c) for k, t in self.made.items() for key, c in t.cache.items()}


@functools.lru_cache(maxsize=256)
def tune_tag(device: torch.device, *bucket: object) -> int:
    """The kernel's ``tune_tag`` for a tuner's bucket on ``device`` (see the module docstring)."""
    name = torch.cuda.get_device_name(device) if device.type == "cuda" else device.type
    return zlib.crc32(repr((name, *bucket)).encode()) & 0x7FFFFFFF
