#!/bin/bash
# The command run on the lent GPU machine (see docs/benchmarks.md, "## Rigel on GPU").
# Layout there: .device/{lepus (code), whl (transformers 5.24 + deps), clips (MP4 workload)}.
set -u
cd "$(dirname "$0")/../.."
export PYTHONUNBUFFERED=1 NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
  --target /tmp/site ../whl/*.whl || echo "wheel install failed"
export PYTHONPATH=/tmp/site:$PWD
nvidia-smi --query-gpu=name,memory.total,clocks.max.sm --format=csv
if ! python3 -c "import torch, transformers, peft; print(torch.__version__, transformers.__version__, peft.__version__, torch.cuda.device_count())"; then
  echo "carried wheels failed: the image's transformers"; export PYTHONPATH=$PWD
fi
mkdir -p "$OUT/res"
if [ "${PARITY:-1}" = 1 ]; then
  timeout 90 python3 bench/gpu/processor_parity.py --out "$OUT/res/parity.json" --write-fixtures "$OUT/res"
fi
timeout "${SINGLE_S:-300}" python3 bench/gpu_rigel.py --out "$OUT/res" --clips ../clips ${SINGLE_ARGS:-}
NG=$(python3 -c "import torch; print(torch.cuda.device_count())")
if [ "$NG" -ge 2 ] && [ "${MULTI:-1}" = 1 ]; then
  timeout "${MULTI_S:-170}" torchrun --nproc_per_node "$NG" bench/gpu_rigel.py --out "$OUT/res" \
    --clips ../clips --sections engine,phase2 ${MULTI_ARGS:-}
fi
echo "device_run done"
