#!/bin/bash
# Copy what the GPU run needs from this worktree into the lead's checkout's ignored .device/
# folder (the device machine receives that checkout; name .device in `carry`).
# LEPUS_DEVICE_DIR names another ignored folder (two sessions preparing calls side by side);
# The VATEX-EVAL file always travels: the benchmarks' captions and the local tokenizer come from it
# (without it they stop, issue 29).
set -eu
SRC="$(cd "$(dirname "$0")/../.." && pwd)"
DEVICE_DIR=${LEPUS_DEVICE_DIR:-/work/main/.device}
DST=$DEVICE_DIR/lepus
rm -rf "$DST"
mkdir -p "$DST/training_bridge" "$DST/bench/gpu" "$DST/data/vatex_eval"
cp -r "$SRC/training_bridge/rigel" "$DST/training_bridge/"
# rigel_vatex_eval.py scores through training_bridge.metrics.benchmark (correlation_row)
cp -r "$SRC/training_bridge/metrics" "$DST/training_bridge/"
: > "$DST/training_bridge/__init__.py"
cp "$SRC/bench/gpu_rigel.py" "$SRC/bench/provenance.py" "$SRC/bench/make_vatex_clips.py" \
  "$SRC/bench/rigel_vatex_eval.py" "$DST/bench/"
cp "$SRC/requirements.txt" "$DST/"  # provenance.py records its pins
cp "$SRC"/bench/gpu/*.py "$SRC"/bench/gpu/*.sh "$DST/bench/gpu/"
cp "$SRC/data/vatex_eval/vid_cans_score_dict.json" "$SRC/data/vatex_eval/NOTICE.md" "$DST/data/vatex_eval/"
# the code that runs there (the raw files' own git fields name the lead's checkout)
(cd "$SRC" && echo "$(git rev-parse --abbrev-ref HEAD) $(git rev-parse --short HEAD)$(git diff --quiet HEAD || echo -dirty)") >"$DST/CODE_REVISION"
find "$DST" -name __pycache__ -prune -exec rm -rf {} +
du -sh "$DEVICE_DIR"
