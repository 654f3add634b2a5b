#!/bin/bash
# One bundled GPU call (helper gpu2, see docs/benchmarks.md "## Rigel on GPU"): single GPU, single
# process; every section under a watchdog (the script dumps its stacks and exits on a hang) and the
# whole under a deadline; a second attempt resumes the sections that did not finish.
# Layout there: .device/{lepus (code), whl (transformers 5.24 + deps), clips (MP4 workload)}.
set -u
cd "$(dirname "$0")/../.."
START=$SECONDS
DEADLINE=${DEADLINE:-170}
export PYTHONUNBUFFERED=1 OMP_NUM_THREADS=1 TOKENIZERS_PARALLELISM=false
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
  --target /tmp/site ../whl/*.whl || echo "wheel install failed"
export PYTHONPATH=/tmp/site:$PWD
nvidia-smi --query-gpu=name,memory.total,clocks.max.sm --format=csv,noheader
mkdir -p "$OUT/res"
SECTIONS=${SECTIONS:-env,shared,engine,phase2_train,fused}
LIMITS=${LIMITS:-shared=45,engine=60,phase2_train=60,fused=60}
ARGS="--out $OUT/res --clips ../clips --sections $SECTIONS --limits $LIMITS --samples 1024 \
  --cpu-samples 384 --shared-samples 1536 --shared-batch 128 --phase2-train-samples 240 \
  --gpu-reps 3 --phase2-steps 16 --mp-context ${MP:-fork} ${EXTRA:-}"
for attempt in 1 2; do
  left=$((DEADLINE - (SECONDS - START)))
  [ "$left" -lt 40 ] && break
  echo "attempt $attempt, $left s left"
  # a file, not a pipe: worker processes orphaned by a watchdog exit must not hold the caller
  timeout -s KILL "$left" python3 bench/gpu_rigel.py $ARGS --resume >>"$OUT/log.txt" 2>&1
  grep -a "^\[rank" "$OUT/log.txt" | cut -c1-300 | tail -n 40
  python3 - "$OUT/res/results.json" "$SECTIONS" <<'PY' && break
import json, sys
d = json.load(open(sys.argv[1]))
left = [s for s in sys.argv[2].split(",") if not isinstance(d.get(s), dict) or "error" in d[s]]
print("sections without a result:", left)
sys.exit(1 if left else 0)
PY
done
echo "device_run2 done after $((SECONDS - START)) s"
