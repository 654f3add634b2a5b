#!/bin/bash
# Issue 17, third pass (docs/benchmarks.md, "Issue 17, third pass"): scoring with the vision
# blocks compiled, clips keyframed at the sampled frames, and NVDEC through PyNvVideoCodec. From
# the lead's checkout, after `LEPUS_DEVICE_DIR=/work/main/.devcv LEPUS_DEVICE_DATA=0 bash
# bench/gpu/sync_device.sh`, the wheels in .whl/ and PyNvVideoCodec unpacked and trimmed (the CUDA
# 13 module, no samples) as .devcv/nvsite.tar.xz; carry [".devcv", ".whl"]:
#   STAGES=clips,nvdec,routes bash .devcv/lepus/bench/gpu/issue17_pass3_scoring.sh   # call 1
#   STAGES=clips,e2e ROUTE=bf16_cv bash .devcv/lepus/bench/gpu/issue17_pass3_scoring.sh  # call 2
# Raw files (bench/provenance.py) and logs land in $OUT.
set -u
cd "$(dirname "$0")/../.."
export PYTHONUNBUFFERED=1 OMP_NUM_THREADS=1 TOKENIZERS_PARALLELISM=false
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
  --target /tmp/site ../../.whl/*.whl || echo "wheel install failed"
mkdir -p /tmp/nvsite && tar -xJf ../nvsite.tar.xz -C /tmp/nvsite || echo "no PyNvVideoCodec"
export PYTHONPATH=/tmp/site:/tmp/nvsite:$PWD LEPUS_BENCH_RESULTS=$OUT
export LEPUS_CODE_REVISION="$(cat CODE_REVISION 2>/dev/null)"
{
  nvidia-smi --query-gpu=name,memory.total,clocks.max.sm,driver_version --format=csv,noheader
  python3 -c "import torch, transformers, av; print(torch.__version__, transformers.__version__, av.__version__)"
  nproc; uptime; echo "code: $LEPUS_CODE_REVISION"
} 2>&1 | tee "$OUT/env_log.txt"
for stage in ${STAGES//,/ }; do
  echo "== $stage at $SECONDS s"
  case $stage in
  clips)
    python3 bench/make_vatex_clips.py /tmp/clips 256 &
    python3 bench/make_vatex_clips.py /tmp/kclips 256 --keyframes-at-samples 8 &
    wait
    python3 - <<'PY' | tee -a "$OUT/env_log.txt"
import av, glob, os
for d in ("/tmp/clips", "/tmp/kclips"):
    files = sorted(glob.glob(d + "/*.mp4"))
    c = av.open(files[0]); s = c.streams.video[0]
    keys = sum(1 for p in c.demux(s) if p.is_keyframe and p.size)
    print(f"{d}: {len(files)} clips, first {os.path.getsize(files[0])} bytes, {keys} keyframes")
PY
    ;;
  nvdec)
    timeout "${NVDEC_LIMIT:-120}" python3 bench/gpu/nvdec_probe.py --clips /tmp/clips \
      --threads ${NVDEC_THREADS:-1,4,8,16} >"$OUT/nvdec_log.txt" 2>&1
    tail -c 3000 "$OUT/nvdec_log.txt" ;;
  nvdeck)  # the keyframed clips
    timeout "${NVDEC_LIMIT:-120}" python3 bench/gpu/nvdec_probe.py --clips /tmp/kclips \
      --threads ${NVDEC_THREADS:-1,4,8,16} --name nvdec_probe_keyframed >"$OUT/nvdeck_log.txt" 2>&1
    tail -c 3000 "$OUT/nvdeck_log.txt" ;;
  routes)
    timeout "${SCORING_LIMIT:-400}" python3 bench/gpu/scoring_limits.py --clips /tmp/clips \
      --keyframe-clips /tmp/kclips --workers 15 --decoders av --e2e-runs 0 \
      --routes "${ROUTES:-bf16,bf16_cv,fp8_lm_cv,fp8_cv}" --name scoring_routes \
      >"$OUT/routes_log.txt" 2>&1
    grep -a "^\[rank" "$OUT/routes_log.txt" | grep -v "kernels" | cut -c1-700 ;;
  e2e)
    timeout "${SCORING_LIMIT:-420}" python3 bench/gpu/scoring_limits.py --clips /tmp/clips \
      --keyframe-clips /tmp/kclips --workers 15 --decoders av --e2e-runs 3 \
      --routes "${ROUTE:-bf16_cv}" --name scoring_e2e >"$OUT/e2e_log.txt" 2>&1
    grep -a "^\[rank" "$OUT/e2e_log.txt" | grep -v "kernels" | cut -c1-700 ;;
  esac
done
uptime
echo "issue17_pass3_scoring done after $SECONDS s"
