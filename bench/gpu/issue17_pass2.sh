#!/bin/bash
# Issue 17, second pass (docs/benchmarks.md, "Issue 17, second pass"): the GPU calls on the fixed
# clips. From the lead's checkout, after `bash bench/gpu/sync_device.sh` (from the helper's
# worktree) and the wheels in .whl/; carry [".device", ".whl"]:
#   STAGES=scoring,p2one bash .device/lepus/bench/gpu/issue17_pass2.sh   # call A / B, one GPU
#   STAGES=p2scale       bash .device/lepus/bench/gpu/issue17_pass2.sh   # call C, two GPUs
# Third pass (two GPUs with the vision tower ahead, rank 0 profiled, then one GPU at batch 8):
#   STAGES=p2scale,p2one P2_WORKERS=12 P2_PROFILE1=0 P2_PROFILE2=6 \
#     P2_EXTRA="--phase2-variants overlap" TAG=_pass3 bash .device/lepus/bench/gpu/issue17_pass2.sh
# Stages: scoring (bench/gpu/scoring_limits.py; SCORING_EXTRA, SCORING_LIMIT), p2one (Phase 2 on
# one GPU, 3 runs + a profiled run; P2_EXTRA, P2_LIMIT), p2scale (Phase 2 at an effective batch
# of 16: one GPU, then two under torchrun; P2_EXTRA). P2_WORKERS: decoding processes per
# process (15 by default); P2_PROFILE1 / P2_PROFILE2: steps profiled in p2one (6 by default) /
# in the torchrun run (0 by default; rank 0's). Raw files (bench/provenance.py) and logs land in
# $OUT.
set -u
cd "$(dirname "$0")/../.."
export PYTHONUNBUFFERED=1 OMP_NUM_THREADS=1 TOKENIZERS_PARALLELISM=false
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
  --target /tmp/site ../../.whl/*.whl || echo "wheel install failed"
export PYTHONPATH=/tmp/site:$PWD LEPUS_BENCH_RESULTS=$OUT
export LEPUS_CODE_REVISION="$(cat CODE_REVISION 2>/dev/null)"
{
  nvidia-smi --query-gpu=name,memory.total,clocks.max.sm,driver_version --format=csv,noheader
  python3 -c "import torch, transformers, peft, av; print(torch.__version__, transformers.__version__, peft.__version__, av.__version__, torch.cuda.device_count())"
  nproc; uptime; echo "code: $LEPUS_CODE_REVISION"
} 2>&1 | tee "$OUT/env_log.txt"
[ -f /tmp/clips/vatex_00255.mp4 ] || python3 bench/make_vatex_clips.py /tmp/clips 256
python3 - <<'PY' | tee -a "$OUT/env_log.txt"
import av, glob, os
files = sorted(glob.glob("/tmp/clips/*.mp4"))
c = av.open(files[0]); s = c.streams.video[0]
keys = sum(1 for p in c.demux(s) if p.is_keyframe and p.size)
print(f"clips: {len(files)}, first {os.path.getsize(files[0])} bytes, {keys} keyframes")
PY
STAGES=${STAGES:-scoring,p2one}
P2="--clips /tmp/clips --n-clips 64 --sections env,phase2_train --phase2-train-dtypes default \
  --phase2-compile on --phase2-runs 3 --phase2-train-samples ${P2_SAMPLES:-480} ${P2_EXTRA:-}"
for stage in ${STAGES//,/ }; do
  echo "== $stage at $SECONDS s"
  case $stage in
  scoring)
    CUDA_VISIBLE_DEVICES=0 timeout "${SCORING_LIMIT:-300}" python3 bench/gpu/scoring_limits.py \
      --clips /tmp/clips --workers 15 --decoders av ${SCORING_EXTRA:---routes bf16,fp8_lm} \
      >"$OUT/scoring_log.txt" 2>&1
    grep -a "^\[rank" "$OUT/scoring_log.txt" | grep -v "kernels" | cut -c1-600 ;;
  p2one)
    CUDA_VISIBLE_DEVICES=0 timeout "${P2_LIMIT:-220}" python3 bench/gpu_rigel.py --out /tmp/p2 $P2 \
      --workers ${P2_WORKERS:-15} --phase2-batch 8 --phase2-profile-steps ${P2_PROFILE1:-6} \
      --raw "phase2_pass2_1gpu_b8${TAG:-}" \
      >"$OUT/phase2_1gpu_log.txt" 2>&1
    grep -a "phase2_train\|Error\|error" "$OUT/phase2_1gpu_log.txt" | cut -c1-500
    grep -a "phase2_profile" "$OUT/phase2_1gpu_log.txt" | cut -c1-2500 ;;
  p2scale)
    CUDA_VISIBLE_DEVICES=0 timeout ${P2_LIMIT1:-200} python3 bench/gpu_rigel.py --out /tmp/p2 $P2 --workers ${P2_WORKERS:-15} \
      --phase2-batch 16 --raw "phase2_pass2_1gpu_b16${TAG:-}" >"$OUT/phase2_1gpu_b16_log.txt" 2>&1
    timeout ${P2_LIMIT2:-220} torchrun --nproc_per_node 2 bench/gpu_rigel.py --out /tmp/p2 $P2 --workers ${P2_WORKERS:-15} \
      --phase2-batch 16 --phase2-profile-steps ${P2_PROFILE2:-0} --raw "phase2_pass2_2gpu_b16${TAG:-}" \
      >"$OUT/phase2_2gpu_b16_log.txt" 2>&1
    grep -ah "phase2_train\|Error\|error" "$OUT"/phase2_*_log.txt | cut -c1-500
    grep -ah "phase2_profile" "$OUT"/phase2_2gpu_b16_log.txt | cut -c1-2500 ;;
  esac
done
uptime
echo "issue17_pass2 done after $SECONDS s"
