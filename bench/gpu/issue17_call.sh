#!/bin/bash
# Issue 17's GPU calls (docs/benchmarks.md, "Issue 17"). From the lead's checkout, after
# `bash bench/gpu/sync_device.sh` and the wheels in .whl/; carry [".device", ".whl"]:
#   PART=scoring bash .device/lepus/bench/gpu/issue17_call.sh   # point 2, GPU 0
#   PART=phase2  bash .device/lepus/bench/gpu/issue17_call.sh   # point 3, one GPU then torchrun
# Raw files (bench/provenance.py) and logs land in $OUT.
set -u
cd "$(dirname "$0")/../.."
export PYTHONUNBUFFERED=1 OMP_NUM_THREADS=1 TOKENIZERS_PARALLELISM=false
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
  --target /tmp/site ../../.whl/*.whl || echo "wheel install failed"
export PYTHONPATH=/tmp/site:$PWD LEPUS_BENCH_RESULTS=$OUT
nvidia-smi --query-gpu=name,memory.total,clocks.max.sm,driver_version --format=csv,noheader
python3 -c "import torch, transformers, peft, av; from av.codec.hwaccel import hwdevices_available as h; print(torch.__version__, transformers.__version__, peft.__version__, av.__version__, torch.cuda.device_count(), h())"
[ -f /tmp/clips/vatex_00255.mp4 ] || python3 bench/make_vatex_clips.py /tmp/clips 256
if [ "${PART:-scoring}" = scoring ]; then
  CUDA_VISIBLE_DEVICES=0 timeout "${LIMIT:-540}" python3 bench/gpu/scoring_limits.py \
    --clips /tmp/clips --workers 15 ${EXTRA:-} >"$OUT/scoring_log.txt" 2>&1
  grep -a "^\[rank" "$OUT/scoring_log.txt" | cut -c1-400
else
  P2="--clips /tmp/clips --n-clips 64 --sections env,phase2_train --phase2-train-dtypes default \
    --phase2-compile on --phase2-runs 3 --phase2-train-samples ${P2_SAMPLES:-720} --workers 15"
  CUDA_VISIBLE_DEVICES=0 timeout 200 python3 bench/gpu_rigel.py --out /tmp/p2 $P2 \
    --phase2-batch 8 --raw phase2_issue17_1gpu_b8 --tag _b8 >"$OUT/phase2_1gpu_b8_log.txt" 2>&1
  CUDA_VISIBLE_DEVICES=0 timeout 160 python3 bench/gpu_rigel.py --out /tmp/p2 $P2 \
    --phase2-batch 16 --raw phase2_issue17_1gpu_b16 >"$OUT/phase2_1gpu_b16_log.txt" 2>&1
  timeout 200 torchrun --nproc_per_node 2 bench/gpu_rigel.py --out /tmp/p2 $P2 \
    --phase2-batch 16 --raw phase2_issue17_2gpu_b16 >"$OUT/phase2_2gpu_b16_log.txt" 2>&1
  grep -ah "phase2_train\|Error\|error" "$OUT"/phase2_*_log.txt | cut -c1-400
fi
echo "issue17_call done after $SECONDS s"
