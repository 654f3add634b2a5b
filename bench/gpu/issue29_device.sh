#!/bin/bash
# Issue 29 point 1 and issue 26 point 2 on one GPU, on the real captions (docs/benchmarks.md,
# "Issue 29: scoring on the real captions"). Run from the repository root on the device machine,
# the checkout itself (not a copy in .device/), with `carry: [".whl"]` (transformers 5.24.0, peft
# 0.21.2, av 18.1.0):
#   STAGES=env,clips,scoring,vclips,presets,images REV=<commit> [ROUNDS='1 2 3'] bash bench/gpu/issue29_device.sh
# Every stage stops the script if the VATEX-EVAL file is missing (the benchmarks refuse to run on
# stand-ins). Raw files (bench/provenance.py) go to /tmp/raw and are packed into $OUT/raw.tgz after
# each stage, so a call cut off keeps what it measured; logs land in $OUT.
set -u
cd "$(dirname "$0")/../.."
test -f data/vatex_eval/vid_cans_score_dict.json || { echo "missing data/vatex_eval"; exit 2; }
export PYTHONUNBUFFERED=1 OMP_NUM_THREADS=1 TOKENIZERS_PARALLELISM=false
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
  --target /tmp/site .whl/*.whl || { echo "wheel install failed"; exit 2; }
export PYTHONPATH=/tmp/site:$PWD LEPUS_BENCH_RESULTS=/tmp/raw LEPUS_CODE_REVISION="${REV:-unknown}"
mkdir -p /tmp/raw
RUNS=${RUNS:-3}
pack() { tar -czf "$OUT/raw.tgz" -C /tmp/raw . ; }
for stage in ${STAGES//,/ }; do
  echo "== $stage at $SECONDS s (load $(cut -d' ' -f1-3 /proc/loadavg))"
  case $stage in
  env)
    {
      nvidia-smi --query-gpu=name,memory.total,clocks.max.sm,driver_version --format=csv,noheader
      python3 -c "import torch, transformers, peft, av; print(torch.__version__, transformers.__version__, peft.__version__, av.__version__)"
      nproc; uptime; echo "code: $LEPUS_CODE_REVISION"
      sha256sum data/vatex_eval/vid_cans_score_dict.json
    } 2>&1 | tee "$OUT/env_log.txt" ;;
  clips)  # scoring_limits' 256 clips (448 px, 5 s, 24 fps)
    python3 bench/make_vatex_clips.py /tmp/clips 256 ;;
  scoring)  # the default route, GPU alone and end to end from MP4, RUNS runs
    timeout "${SCORING_LIMIT:-560}" python3 bench/gpu/scoring_limits.py --clips /tmp/clips \
      --workers 15 --decoders av --e2e-runs "$RUNS" --routes bf16 --name scoring_real_captions \
      >"$OUT/scoring_log.txt" 2>&1
    grep -a "^\[rank" "$OUT/scoring_log.txt" | grep -v "kernels" | cut -c1-600 ;;
  vclips)  # VATEX-EVAL's 3,000 clips
    python3 bench/make_vatex_clips.py /tmp/vclips "${VCLIPS:-3000}" ;;
  presets)  # both presets, reference-free, alternated, one round per entry of ROUNDS
    for round in ${ROUNDS:-1 2 3}; do
      for preset in default paper-budget; do
        timeout 280 python3 bench/rigel_vatex_eval.py --preset "$preset" --clips-dir /tmp/vclips \
          --out "/tmp/rve_${preset}_$round" --batch 128 --protocols "${PROTOCOLS:-reference-free}" \
          >"$OUT/presets_log.txt" 2>&1 || echo "preset $preset round $round failed"
        grep -a "seconds\|ms_per_sample" "$OUT/presets_log.txt" | tail -3 | cut -c1-300
      done
      pack
    done ;;
  images)  # VATEX-EVAL's captions on 3,000 JPEG stills (T = 1), both presets, alternated
    for round in ${ROUNDS:-1 2 3}; do
      for preset in default paper-budget; do
        timeout 280 python3 bench/rigel_vatex_eval.py --images --preset "$preset" \
          --clips-dir /tmp/stills --out "/tmp/rvi_${preset}_$round" --batch 128 \
          --protocols "${PROTOCOLS:-reference-free}" >"$OUT/images_log.txt" 2>&1 \
          || echo "images $preset round $round failed"
        grep -a "seconds\|ms_per_sample" "$OUT/images_log.txt" | tail -3 | cut -c1-300
      done
      pack
    done ;;
  esac
  pack
done
uptime
echo "issue29_device done after $SECONDS s"
