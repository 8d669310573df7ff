#!/usr/bin/env bash
# Ray for the GPU machine (Python 3.12, no Ray in its image), into .whl-ray/ of this repository:
# the wheel unpacked less its Java jars, RLlib and the dashboard's web client (78 MB -> 29 MB packed,
# under the 64 MiB carry limit beside .whl/), and the jsonschema family its image lacks.
# scripts/gpu_stage.sh unpacks it into /tmp/site.
set -euo pipefail
root=$(git rev-parse --show-toplevel)
cd "$root"
version=${1:-2.58.0}
grep -qx '/.whl-ray/' .git/info/exclude 2>/dev/null || echo '/.whl-ray/' >> .git/info/exclude
rm -rf .whl-ray && mkdir -p .whl-ray
scratch=$(mktemp -d)
trap 'rm -rf "$scratch"' EXIT
python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
  --platform manylinux2014_x86_64 --platform manylinux_2_17_x86_64 --platform any -d "$scratch" \
  "ray==$version" jsonschema jsonschema-specifications referencing rpds-py
(cd "$scratch" && mkdir unpacked && cd unpacked && unzip -q ../ray-*.whl \
  && rm -rf ray/jars ray/rllib ray/dashboard/client/build \
  && tar -cf - ray ray-*.dist-info | xz -T0 -6 > "$root/.whl-ray/ray-min.tar.xz")
cp "$scratch"/*.whl .whl-ray/ && rm -f .whl-ray/ray-*.whl
du -sh .whl-ray
