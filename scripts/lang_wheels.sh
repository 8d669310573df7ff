#!/usr/bin/env bash
# Wheels for `scripts/gpu_stage.sh lang` (issue 42: TileLang and CuTe), for the GPU image's Python
# 3.12 on x86-64, in two folders of under 64 MiB each (one device call carries at most 64 MiB):
#   .whl-lang-a/  tilelang 0.1.15 (~50 MB)
#   .whl-lang-b/  z3-solver (~29 MB), apache-tvm-ffi 0.1.12 (tilelang needs < 0.1.13), nvidia-cutlass
#                 4.2.0.0 (the CuTe headers, ~6.4 MB), ml-dtypes, cloudpickle, torch-c-dlpack-ext, tqdm
# Both are kept out of git (.git/info/exclude). Usage, from the project root: scripts/lang_wheels.sh
set -euo pipefail
root=$(git rev-parse --show-toplevel)
cd "$root"
exclude="$(git rev-parse --git-common-dir)/info/exclude"
for folder in .whl-lang-a .whl-lang-b; do
  grep -qx "/$folder/" "$exclude" 2>/dev/null || echo "/$folder/" >> "$exclude"
  mkdir -p "$folder"
done
plat=(--platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64 --platform manylinux_2_24_x86_64
      --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 --platform any)
fetch() {
  local folder=$1; shift
  for pkg in "$@"; do
    python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
      "${plat[@]}" -d "$folder" "$pkg" 2>&1 | grep -v '^WARNING: Location' || true
    ls "$folder" | grep -qi "^$(echo "${pkg%%[=<>]*}" | tr '-' '_')" || { echo "could not download $pkg" >&2; exit 1; }
  done
}
fetch .whl-lang-a tilelang==0.1.15
fetch .whl-lang-b "z3-solver>=4.13.0,<4.15.5" apache-tvm-ffi==0.1.12 nvidia-cutlass==4.2.0.0 ml-dtypes \
  cloudpickle torch-c-dlpack-ext tqdm
du -sh .whl-lang-a .whl-lang-b
