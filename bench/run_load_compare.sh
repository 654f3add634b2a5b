#!/usr/bin/env bash
# Lepus vs Label Studio under load, side by side, from a clean state, in one command:
#
#     bash bench/run_load_compare.sh                      # 20 and 200 workers, 60 s each
#     bash bench/run_load_compare.sh --workers 20 --duration 20   # any load_workers.py option
#
# What it does (as root):
#   * takes /tmp/lepus-bench.lock (one heavy benchmark at a time on this machine);
#   * creates a private network namespace `lepusbench` with only its own loopback up, so nothing --
#     not a DNS query, not Label Studio's analytics or version check -- can leave the machine;
#   * runs `bench/load_workers.py --compare label-studio` inside it. That starts, inside the
#     namespace: a private PostgreSQL cluster (unix socket only), a private Redis (unix socket only),
#     Lepus under gunicorn, Label Studio as it starts by default (SQLite, `label-studio start`) and on
#     PostgreSQL (DJANGO_DB=default, POSTGRE_*; the same gunicorn configuration as Lepus); drives each
#     with the same simulated workers over the namespace's loopback; counts correctness from each
#     database; stops everything and deletes the temporary folder;
#   * on exit (success, failure or Ctrl-C) kills whatever is still running inside the namespace
#     (only processes of this run live there) and deletes the namespace.
# Label Studio is installed on first use into bench/.peers/ls-venv (git-ignored), never into Lepus's
# virtualenv. The JSON report goes to bench/results/load_<date>.json and the table to stdout.
set -euo pipefail

REPO_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
PYTHON="${LEPUS_PYTHON:-/work/main/.venv/bin/python}"
[ -x "$PYTHON" ] || PYTHON="$REPO_ROOT/.venv/bin/python"
NETNS="${LEPUSBENCH_NETNS:-lepusbench}"
OUTPUT="${LEPUSBENCH_OUTPUT:-$REPO_ROOT/bench/results/load_$(date -I).json}"
LOCK=/tmp/lepus-bench.lock

if [ "$(id -u)" != 0 ]; then
    echo "run_load_compare.sh needs root (network namespace, private PostgreSQL as user postgres)" >&2
    exit 2
fi
if [ -z "${LEPUSBENCH_LOCKED:-}" ]; then
    exec env LEPUSBENCH_LOCKED=1 flock "$LOCK" bash "$0" "$@"
fi

RUN_TMP=""
cleanup() {
    local status=$?
    if ip netns list | grep -qw "$NETNS"; then
        # Everything inside the namespace was started by this run.
        for pid in $(ip netns pids "$NETNS"); do kill -TERM "$pid" 2>/dev/null || true; done
        sleep 2
        for pid in $(ip netns pids "$NETNS"); do kill -KILL "$pid" 2>/dev/null || true; done
        ip netns delete "$NETNS" || true
    fi
    # Only this run's folder (another run may be waiting on the lock with its own).
    if [ -n "$RUN_TMP" ]; then rm -rf "$RUN_TMP"; fi
    exit $status
}
trap cleanup EXIT INT TERM

if ip netns list | grep -qw "$NETNS"; then
    echo "network namespace $NETNS already exists (a previous run?); removing it" >&2
    for pid in $(ip netns pids "$NETNS"); do kill -KILL "$pid" 2>/dev/null || true; done
    ip netns delete "$NETNS"
fi
ip netns add "$NETNS"
RUN_TMP="$(mktemp -d /tmp/lepusbench-run-XXXXXX)"
chmod 755 "$RUN_TMP"  # the private PostgreSQL runs as user postgres below it
ip netns exec "$NETNS" ip link set lo up

mkdir -p "$(dirname "$OUTPUT")"
cd "$REPO_ROOT"
# The defaults come first so that any option given on the command line overrides them.
ip netns exec "$NETNS" env LEPUS_PYTHON="$PYTHON" LEPUSBENCH_TMPDIR="$RUN_TMP" "$PYTHON" bench/load_workers.py \
    --compare label-studio --workers 20,200 --paced 20:5000 --duration 60 --output "$OUTPUT" "$@"
echo "report: $OUTPUT"
