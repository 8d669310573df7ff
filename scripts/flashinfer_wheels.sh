#!/usr/bin/env bash
# Download the wheels that let FlashInfer's peers run on a GPU machine without internet (Python
# 3.12, x86-64; torch, ninja, einops, requests, tqdm, numpy, packaging, nvidia-ml-py and the CUDA
# toolkit already there) into .whl-flashinfer/ of the current repository (kept out of git through
# .git/info/exclude). Usage, from the project root:  scripts/flashinfer_wheels.sh
#
# flashinfer-python 0.6.17 (16 MB) is the newest release that imports without
# nvidia-cutlass-dsl, nvidia-cudnn-frontend, cuda-tile and nccl4py, which it declares but which its
# prefill and decode kernels do not use (0.6.18 imports cutlass at start; 0.7.x is 34-62 MB). It
# needs apache-tvm-ffi (in the project's own .whl/), jinja2 and filelock (torch's), and nvcc at
# $CUDA_HOME for its JIT builds. Install with --no-deps beside the project's wheels:
#   python3 -m pip install -q --no-index --no-deps --target /tmp/site .whl/*.whl .whl-flashinfer/*.whl
set -euo pipefail
root=$(git rev-parse --show-toplevel)
cd "$root"
grep -qx '/.whl-flashinfer/' .git/info/exclude 2>/dev/null \
  || { mkdir -p .git/info; echo '/.whl-flashinfer/' >> .git/info/exclude; }
mkdir -p .whl-flashinfer
wheels=(flashinfer-python==0.6.17)
for pkg in "${wheels[@]}"; do
  if ! python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 \
      --implementation cp --platform manylinux_2_28_x86_64 --platform manylinux2014_x86_64 \
      --platform any -d .whl-flashinfer "$pkg" 2>/tmp/flashinfer-wheels.log; then
    grep -v '^WARNING: Location' /tmp/flashinfer-wheels.log >&2
    echo "could not download $pkg" >&2
    exit 1
  fi
done
ls -l .whl-flashinfer
du -sh .whl-flashinfer
