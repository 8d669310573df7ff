#!/usr/bin/env bash
# Download the wheels that let FlashInfer's peers run on a GPU machine without internet (Python
# 3.12, x86-64; torch, ninja, einops, requests, tqdm, numpy, packaging, nvidia-ml-py, jinja2,
# filelock and the CUDA toolkit already there) into .whl-flashinfer/ of the current repository
# (kept out of git through .git/info/exclude). Usage, from the project root:
#   scripts/flashinfer_wheels.sh              the wheel (16 MB)
#   scripts/flashinfer_wheels.sh --prebuild   and FlashInfer's kernels for Hopper, into .fi-aot/
#
# flashinfer-python 0.6.17 (16 MB) is the newest release that imports without
# nvidia-cutlass-dsl, nvidia-cudnn-frontend, cuda-tile and nccl4py, which it declares but which its
# prefill and decode kernels do not use (0.6.18 imports cutlass at start; 0.7.x is 34-62 MB). It
# needs apache-tvm-ffi (in the project's own .whl/) and nvcc at $CUDA_HOME for its JIT builds.
# Install with --no-deps beside the project's wheels:
#   python3 -m pip install -q --no-index --no-deps --target /tmp/site .whl/*.whl .whl-flashinfer/*.whl
#
# FlashInfer compiles each kernel module with nvcc on first use, and its Hopper (FA3) modules are
# slow to build (here, 2 cores: 2.5-6 min of wall time per prefill module, 13 min of CPU time for
# the six bf16 modules' FA3 parts; on the 16-core H100 host six modules did not finish in 170 s).
# --prebuild compiles them here instead (nvcc needs no GPU): the modules the three peers use
# (single prefill and ragged/paged batch prefill with the FA3 backend, batch decode; head_dim 64
# and 128) for bf16 and fp16, as the library's definitions need (FLASHINFER_DTYPES=bf16 for one),
# 25-30 minutes a dtype on 2 cores, 6.6 MB a dtype.
# They go to .fi-aot/<module>/<module>.so; on the GPU machine, after the pip line above:
#   mkdir -p /tmp/site/flashinfer/data/aot && cp -r .fi-aot/* /tmp/site/flashinfer/data/aot/
# and FlashInfer loads them as its AOT modules (no nvcc, no ~/.cache/flashinfer). Pass both
# .whl-flashinfer and .fi-aot in the device call's carry. The build needs curand's headers (taken
# from the nvidia-curand wheel when $CUDA_HOME lacks them) and links -lcuda (an empty stub here;
# the driver's libcuda.so.1 there).
set -euo pipefail
root=$(git rev-parse --show-toplevel)
cd "$root"
for ignored in /.whl-flashinfer/ /.fi-aot/ /.fi-aot-build/; do
  grep -qx "$ignored" .git/info/exclude 2>/dev/null \
    || { mkdir -p .git/info; echo "$ignored" >> .git/info/exclude; }
done
download() {  # NAME==VERSION DIR
  if ! python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 \
      --implementation cp --platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64 \
      --platform manylinux2014_x86_64 --platform any -d "$2" "$1" 2>/tmp/flashinfer-wheels.log; then
    grep -v '^WARNING: Location' /tmp/flashinfer-wheels.log >&2
    echo "could not download $1" >&2
    exit 1
  fi
}
mkdir -p .whl-flashinfer
download flashinfer-python==0.6.17 .whl-flashinfer
ls -l .whl-flashinfer
du -sh .whl-flashinfer
[ "${1:-}" = "--prebuild" ] || exit 0

cuda=${CUDA_HOME:-/usr/local/cuda}
python=${PYTHON:-$root/.venv/bin/python}  # any Python with torch (a CPU build is enough)
build=$root/.fi-aot-build
mkdir -p "$build"
if [ ! -f "$build/site/.flashinfer-0.6.17" ]; then  # once: new files would make ninja rebuild all
  rm -rf "$build/site" && python3 -m pip install -q --no-deps --no-compile --target "$build/site" \
    .whl-flashinfer/flashinfer_python-0.6.17-py3-none-any.whl && touch "$build/site/.flashinfer-0.6.17"
fi
extra_include=""
if [ ! -f "$cuda/include/curand_kernel.h" ]; then  # cutlass's utilities include it
  [ -d "$build/curand" ] || { download nvidia-curand==10.4.4.72 "$build/curand-wheel"
    unzip -q -o "$build"/curand-wheel/*.whl 'nvidia/cu13/include/*' -d "$build/curand"
    rm -rf "$build/curand-wheel"; }
  extra_include=$build/curand/nvidia/cu13/include
fi
if ! ls "$cuda"/lib64/stubs/libcuda.so /usr/lib/x86_64-linux-gnu/libcuda.so >/dev/null 2>&1; then
  mkdir -p "$build/stub"
  echo "" | gcc -shared -x c - -o "$build/stub/libcuda.so" -Wl,-soname,libcuda.so.1
fi
CPATH=${extra_include}${CPATH:+:$CPATH} LIBRARY_PATH=$build/stub${LIBRARY_PATH:+:$LIBRARY_PATH} \
PYTHONPATH=$build/site FLASHINFER_CUDA_ARCH_LIST=9.0a \
FLASHINFER_WORKSPACE_BASE=${FLASHINFER_WORKSPACE_BASE:-$build} CUDA_HOME=$cuda \
FLASHINFER_DTYPES=${FLASHINFER_DTYPES:-bf16 fp16} "$python" - "$root/.fi-aot" <<'PY'
import importlib.abc, os, shutil, sys, time
from pathlib import Path


class Refuse(importlib.abc.MetaPathFinder):
    """FlashInfer 0.6.17 imports these only if present, and then asks for a GPU at import."""

    def find_spec(self, name, path, target=None):
        if name.split(".")[0] in ("cutlass", "cudnn") or name.startswith("cuda.tile"):
            raise ImportError(f"{name}: not used by the prebuilt modules")


sys.meta_path.insert(0, Refuse())
import torch  # noqa: E402
from flashinfer.jit import (  # noqa: E402
    gen_batch_decode_module,
    gen_batch_prefill_module,
    gen_single_prefill_module,
)
from flashinfer.jit.core import build_jit_specs  # noqa: E402

dtypes = {"bf16": torch.bfloat16, "fp16": torch.float16}
specs = []
for name in os.environ["FLASHINFER_DTYPES"].split():
    dtype = dtypes[name]
    for head_dim in (128, 64):
        common = (head_dim, head_dim, 0, False, False)
        specs.append(gen_single_prefill_module("fa3", dtype, dtype, dtype, *common, False))
        specs.append(gen_batch_decode_module(dtype, dtype, dtype, torch.int32, *common))
        specs.append(gen_batch_prefill_module("fa3", dtype, dtype, dtype, torch.int32, *common, False))
started = time.time()
build_jit_specs(specs, verbose=False, skip_prebuilt=False)
print(f"built {len(specs)} modules in {time.time() - started:.0f} s")
out = Path(sys.argv[1])
for spec in specs:
    (out / spec.name).mkdir(parents=True, exist_ok=True)
    shutil.copy2(spec.jit_library_path, out / spec.name / f"{spec.name}.so")
    print(f"{spec.jit_library_path.stat().st_size:>9} {spec.name}")
PY
du -sh .fi-aot
