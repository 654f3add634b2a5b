#!/bin/bash
# The one driver of the GPU benchmarks on a lent device machine (docs/benchmarks.md, "Rigel on GPU"
# and the issue sections after it). It replaces one script per call (device_run*.sh, issue17_*.sh,
# issue29_device.sh): each call is a list of stages with their options.
#
# Where it runs: either a copy made by `bash bench/gpu/sync_device.sh` in the lead's checkout
# (`bash .device/lepus/bench/gpu/device.sh`, carry [".device", ".whl"]) or the checkout itself
# (`bash bench/gpu/device.sh`, carry [".whl"]). The wheels (transformers, peft, av) are the first of
# $WHL, .whl/, ../../.whl/, ../whl/ that holds any; PyNvVideoCodec is unpacked from ../nvsite.tar.xz
# when it is there.
#
#   STAGES=env,clips,scoring bash bench/gpu/device.sh
#
# Stages (STAGES, comma-separated, run in order):
#   env       nvidia-smi, versions, cores, load, code revision (REV or CODE_REVISION), the
#             VATEX-EVAL file's hash, the clips' keyframes -> $OUT/env_log.txt
#   clips     256 MP4 clips in $CLIPS (/tmp/clips) unless there; kclips: the same keyframed at the
#             sampled frames in $KCLIPS (/tmp/kclips); vclips: VATEX-EVAL's $VCLIPS (3000) clips
#             in /tmp/vclips
#   parity    bench/gpu/processor_parity.py (the official processor's fixtures)
#   single    bench/gpu_rigel.py $SINGLE_ARGS on one process (SINGLE_S, 300 s)
#   multi     bench/gpu_rigel.py --sections engine,phase2_train $MULTI_ARGS under torchrun on every GPU
#   sections  bench/gpu_rigel.py's bundled sections ($SECTIONS, $LIMITS per section, $EXTRA), each
#             under a watchdog, a second attempt resuming what did not finish, the whole within
#             $DEADLINE (170 s); MP: the workers' start method (fork)
#   scoring   bench/gpu/scoring_limits.py $SCORING_EXTRA ("--decoders av --routes bf16,fp8_lm")
#   routes    scoring_limits on plain and keyframed clips, GPU alone, $ROUTES
#   e2e       scoring_limits end to end, 3 runs, route $ROUTE (bf16_cv)
#   nvdec / nvdeck  scoring_limits.py --nvdec-probe on the plain / keyframed clips ($NVDEC_THREADS)
#   p2one     Phase 2 on one GPU at batch 8: 3 runs + P2_PROFILE1 (6) profiled steps
#   p2scale   Phase 2 at an effective batch of 16: one GPU, then two under torchrun (P2_PROFILE2, 0)
#   presets / images  bench/rigel_vatex_eval.py, both presets alternated, on MP4 / JPEG stills,
#             one round per entry of $ROUNDS ("1 2 3"), $PROTOCOLS (reference-free)
#   protocols bench/rigel_vatex_eval.py on /tmp/vclips, all three protocols, --modes $MODES
#             (together), --rounds $PROTO_ROUNDS (3), --preset $PRESET (default), $PROTO_LIMIT s
# Phase 2 options: P2_SAMPLES (480), P2_WORKERS (15), P2_EXTRA, P2_LIMIT / P2_LIMIT1 / P2_LIMIT2,
# RAW_PREFIX (phase2_pass2) and TAG name the raw files. Limits: SCORING_LIMIT, NVDEC_LIMIT.
# Raw files (bench/provenance.py) go to $RAW ($OUT); when RAW is another folder it is packed into
# $OUT/raw.tgz after each stage, so a call cut off keeps what it measured. Logs land in $OUT.
set -u
cd "$(dirname "$0")/../.."
export PYTHONUNBUFFERED=1 OMP_NUM_THREADS=1 TOKENIZERS_PARALLELISM=false
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
WHL=${WHL:-}
if [ -z "$WHL" ]; then
  for candidate in .whl ../../.whl ../whl; do
    compgen -G "$candidate/*.whl" >/dev/null && { WHL=$candidate; break; }
  done
fi
[ -n "$WHL" ] && python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir \
  --upgrade --target /tmp/site "$WHL"/*.whl || echo "wheel install failed (WHL=$WHL)"
SITE=/tmp/site
if [ -f ../nvsite.tar.xz ]; then
  mkdir -p /tmp/nvsite && tar -xJf ../nvsite.tar.xz -C /tmp/nvsite && SITE=$SITE:/tmp/nvsite
fi
RAW=${RAW:-$OUT}
mkdir -p "$RAW"
export PYTHONPATH=$SITE:$PWD LEPUS_BENCH_RESULTS=$RAW
export LEPUS_CODE_REVISION="${REV:-$(cat CODE_REVISION 2>/dev/null)}"
CLIPS=${CLIPS:-/tmp/clips}
KCLIPS=${KCLIPS:-/tmp/kclips}
RUNS=${RUNS:-3}
TAG=${TAG:-}
RAW_PREFIX=${RAW_PREFIX:-phase2_pass2}
P2="--clips $CLIPS --n-clips 64 --sections env,phase2_train --phase2-train-dtypes default \
  --phase2-compile on --phase2-runs 3 --phase2-train-samples ${P2_SAMPLES:-480} \
  --workers ${P2_WORKERS:-15} ${P2_EXTRA:-}"

pack() { [ "$RAW" = "$OUT" ] || tar -czf "$OUT/raw.tgz" -C "$RAW" . ; }
ranks() { grep -a "^\[rank" "$1" | grep -v "kernels" | cut -c1-700; }
keyframes() {
  python3 - "$@" <<'PY'
import av, glob, os, sys
for folder in sys.argv[1:]:
    files = sorted(glob.glob(folder + "/*.mp4"))
    if not files:
        continue
    c = av.open(files[0]); s = c.streams.video[0]
    keys = sum(1 for p in c.demux(s) if p.is_keyframe and p.size)
    print(f"{folder}: {len(files)} clips, first {os.path.getsize(files[0])} bytes, {keys} keyframes")
PY
}
need_vatex_eval() {
  test -f data/vatex_eval/vid_cans_score_dict.json || { echo "missing data/vatex_eval"; exit 2; }
}
rigel_vatex_eval() {  # $1: stage (presets | images), $2: clips folder, $3..: extra arguments
  local stage=$1 folder=$2; shift 2
  for round in ${ROUNDS:-1 2 3}; do
    for preset in default paper-budget; do
      timeout 280 python3 bench/rigel_vatex_eval.py "$@" --preset "$preset" --clips-dir "$folder" \
        --out "/tmp/rv_${stage}_${preset}_$round" --batch 128 \
        --protocols "${PROTOCOLS:-reference-free}" >"$OUT/${stage}_log.txt" 2>&1 \
        || echo "$stage $preset round $round failed"
      grep -a "seconds\|ms_per_sample" "$OUT/${stage}_log.txt" | tail -3 | cut -c1-300
    done
    pack
  done
}
sections() {  # gpu_rigel.py's bundled sections, resumed once
  local start=$SECONDS deadline=${DEADLINE:-170} left
  local sections=${SECTIONS:-env,shared,engine,phase2_train,fused}
  local args="--out $OUT/res --clips $CLIPS --sections $sections \
    --limits ${LIMITS:-shared=45,engine=60,phase2_train=60,fused=60} --samples 1024 \
    --cpu-samples 384 --shared-samples 1536 --shared-batch 128 --phase2-train-samples 240 \
    --gpu-reps 3 --phase2-steps 16 --mp-context ${MP:-fork} ${EXTRA:-}"
  mkdir -p "$OUT/res"
  for attempt in 1 2; do
    left=$((deadline - (SECONDS - start)))
    [ "$left" -lt 40 ] && break
    echo "attempt $attempt, $left s left"
    # a file, not a pipe: worker processes orphaned by a watchdog exit must not hold the caller
    timeout -s KILL "$left" python3 bench/gpu_rigel.py $args --resume >>"$OUT/log.txt" 2>&1
    grep -a "^\[rank" "$OUT/log.txt" | cut -c1-300 | tail -n 40
    python3 - "$OUT/res/results.json" "$sections" <<'PY' && break
import json, sys
d = json.load(open(sys.argv[1]))
left = [s for s in sys.argv[2].split(",") if not isinstance(d.get(s), dict) or "error" in d[s]]
print("sections without a result:", left)
sys.exit(1 if left else 0)
PY
  done
}

STAGES=${STAGES:-env,clips,scoring}
for stage in ${STAGES//,/ }; do
  echo "== $stage at $SECONDS s (load $(cut -d' ' -f1-3 /proc/loadavg))"
  case $stage in
  env)
    {
      nvidia-smi --query-gpu=name,memory.total,clocks.max.sm,driver_version --format=csv,noheader
      python3 -c "import torch, transformers, peft, av; print(torch.__version__, transformers.__version__, peft.__version__, av.__version__, torch.cuda.device_count())"
      nproc; uptime; echo "code: $LEPUS_CODE_REVISION"
      sha256sum data/vatex_eval/vid_cans_score_dict.json
      keyframes "$CLIPS" "$KCLIPS"
    } 2>&1 | tee -a "$OUT/env_log.txt" ;;
  clips)
    [ -f "$CLIPS/vatex_00255.mp4" ] || python3 bench/make_vatex_clips.py "$CLIPS" 256
    keyframes "$CLIPS" | tee -a "$OUT/env_log.txt" ;;
  kclips)
    python3 bench/make_vatex_clips.py "$KCLIPS" 256 --keyframes-at-samples 8
    keyframes "$KCLIPS" | tee -a "$OUT/env_log.txt" ;;
  vclips)
    need_vatex_eval
    python3 bench/make_vatex_clips.py /tmp/vclips "${VCLIPS:-3000}" ;;
  parity)
    mkdir -p "$OUT/res"
    timeout 90 python3 bench/gpu/processor_parity.py --out "$OUT/res/parity.json" \
      --write-fixtures "$OUT/res" ;;
  single)
    mkdir -p "$OUT/res"
    timeout "${SINGLE_S:-300}" python3 bench/gpu_rigel.py --out "$OUT/res" --clips "$CLIPS" \
      ${SINGLE_ARGS:-} ;;
  multi)
    NG=$(python3 -c "import torch; print(torch.cuda.device_count())")
    [ "$NG" -ge 2 ] && timeout "${MULTI_S:-170}" torchrun --nproc_per_node "$NG" \
      bench/gpu_rigel.py --out "$OUT/res" --clips "$CLIPS" --sections engine,phase2_train \
      ${MULTI_ARGS:-} ;;
  sections)
    sections ;;
  scoring)
    need_vatex_eval
    CUDA_VISIBLE_DEVICES=0 timeout "${SCORING_LIMIT:-300}" python3 bench/gpu/scoring_limits.py \
      --clips "$CLIPS" --workers 15 ${SCORING_EXTRA:---decoders av --routes bf16,fp8_lm} \
      >"$OUT/scoring_log.txt" 2>&1
    ranks "$OUT/scoring_log.txt" ;;
  routes)
    timeout "${SCORING_LIMIT:-400}" python3 bench/gpu/scoring_limits.py --clips "$CLIPS" \
      --keyframe-clips "$KCLIPS" --workers 15 --decoders av --e2e-runs 0 \
      --routes "${ROUTES:-bf16,bf16_cv,fp8_lm_cv,fp8_cv}" --name scoring_routes \
      >"$OUT/routes_log.txt" 2>&1
    ranks "$OUT/routes_log.txt" ;;
  e2e)
    timeout "${SCORING_LIMIT:-420}" python3 bench/gpu/scoring_limits.py --clips "$CLIPS" \
      --keyframe-clips "$KCLIPS" --workers 15 --decoders av --e2e-runs "$RUNS" \
      --routes "${ROUTE:-bf16_cv}" --name scoring_e2e >"$OUT/e2e_log.txt" 2>&1
    ranks "$OUT/e2e_log.txt" ;;
  nvdec | nvdeck)
    folder=$CLIPS name=nvdec_probe
    [ "$stage" = nvdeck ] && folder=$KCLIPS name=nvdec_probe_keyframed
    timeout "${NVDEC_LIMIT:-120}" python3 bench/gpu/scoring_limits.py --clips "$folder" \
      --n-clips 128 --nvdec-probe "${NVDEC_THREADS:-1,4,8,16}" --name "$name" \
      >"$OUT/${stage}_log.txt" 2>&1
    tail -c 3000 "$OUT/${stage}_log.txt" ;;
  p2one)
    CUDA_VISIBLE_DEVICES=0 timeout "${P2_LIMIT:-220}" python3 bench/gpu_rigel.py --out /tmp/p2 $P2 \
      --phase2-batch 8 --phase2-profile-steps "${P2_PROFILE1:-6}" \
      --raw "${RAW_PREFIX}_1gpu_b8$TAG" >"$OUT/phase2_1gpu_log.txt" 2>&1
    grep -a "phase2_train\|Error\|error" "$OUT/phase2_1gpu_log.txt" | cut -c1-500
    grep -a "phase2_profile" "$OUT/phase2_1gpu_log.txt" | cut -c1-2500 ;;
  p2scale)
    CUDA_VISIBLE_DEVICES=0 timeout "${P2_LIMIT1:-200}" python3 bench/gpu_rigel.py --out /tmp/p2 \
      $P2 --phase2-batch 16 --raw "${RAW_PREFIX}_1gpu_b16$TAG" >"$OUT/phase2_1gpu_b16_log.txt" 2>&1
    timeout "${P2_LIMIT2:-220}" torchrun --nproc_per_node 2 bench/gpu_rigel.py --out /tmp/p2 $P2 \
      --phase2-batch 16 --phase2-profile-steps "${P2_PROFILE2:-0}" \
      --raw "${RAW_PREFIX}_2gpu_b16$TAG" >"$OUT/phase2_2gpu_b16_log.txt" 2>&1
    grep -ah "phase2_train\|Error\|error" "$OUT"/phase2_*_log.txt | cut -c1-500
    grep -ah "phase2_profile" "$OUT"/phase2_2gpu_b16_log.txt | cut -c1-2500 ;;
  presets)
    need_vatex_eval
    rigel_vatex_eval presets /tmp/vclips ;;
  images)
    need_vatex_eval
    rigel_vatex_eval images /tmp/stills --images ;;
  protocols)  # issue 29 point 2: the three protocols, separate and/or together, one process
    need_vatex_eval
    timeout "${PROTO_LIMIT:-560}" python3 bench/rigel_vatex_eval.py --clips-dir /tmp/vclips \
      --out "/tmp/rv_protocols_${PRESET:-default}" --batch 128 --preset "${PRESET:-default}" \
      --protocols reference-free,1-ref,all-refs --modes "${MODES:-together}" \
      --rounds "${PROTO_ROUNDS:-3}" ${PROTO_EXTRA:-} >"$OUT/protocols_${PRESET:-default}_log.txt" 2>&1 \
      || echo "protocols ${PRESET:-default} failed or stopped"
    grep -a "^together\|^separate\|^wrote\|Error\|error" "$OUT/protocols_${PRESET:-default}_log.txt" | tail -12 | cut -c1-300 ;;
  *)
    echo "unknown stage: $stage"; exit 2 ;;
  esac
  pack
done
uptime
echo "device.sh done after $SECONDS s"
