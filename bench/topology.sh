#!/usr/bin/env bash
# The production topology of docs/deployment.md on one machine, and the whole flow through it:
#
#     bash bench/topology.sh                 # or: make topology
#     bash bench/topology.sh --clips 24 --workers 12    # any bench/topology_flow.py option
#
# Starts, all on loopback, on free ports, under a temporary folder, owned by this script:
#   * a private PostgreSQL cluster (initdb in the temp folder; as root it runs as user postgres),
#   * a private redis-server (Celery broker db 0, cache db 1),
#   * moto's S3-speaking server, with a bucket,
#   * two gunicorn servers (config.wsgi, production settings: DEBUG off, a random secret key,
#     plain HTTP on loopback so no HTTPS redirect and no Secure cookies),
#   * two Celery workers (`-Q default` and `-Q training`) and celery beat,
# then runs bench/topology_flow.py: import -> videos -> campaign -> judgments (bench/load_workers.py
# over both web servers) -> QC -> review -> release on S3 -> a tiny training run. It prints one JSON
# object (steps, timings, load figures, correctness counts) and exits non-zero when a step failed or
# a correctness count is not 0. The shared services (PostgreSQL on 5432, Redis on 6379) are never
# touched. Everything started here is stopped, and the folder removed, on exit (also on Ctrl-C);
# LEPUS_TOPOLOGY_KEEP=1 keeps the folder (logs) for a look afterwards.
set -euo pipefail

REPO_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$REPO_ROOT"
PY="${LEPUS_PYTHON:-$REPO_ROOT/.venv/bin/python}"
BIN="$(dirname "$PY")"
STARTED=$(date +%s.%N)

log() { echo "[topology $(date +%H:%M:%S)] $*" >&2; }

for tool in redis-server ffmpeg psql; do
  command -v "$tool" >/dev/null || { log "$tool is required"; exit 2; }
done
PG_BIN="$(dirname "$(ls /usr/lib/postgresql/*/bin/pg_ctl 2>/dev/null | sort -V | tail -n1)")"
[ -x "$PG_BIN/initdb" ] || { log "PostgreSQL server binaries not found under /usr/lib/postgresql"; exit 2; }

RUN_DIR="$(mktemp -d /tmp/lepus-topology-XXXXXX)"
chmod 755 "$RUN_DIR"
LOGS="$RUN_DIR/logs"
mkdir -p "$LOGS"

as_postgres() {
  # initdb and postgres refuse to run as root.
  if [ "$(id -u)" = 0 ]; then runuser -u postgres -- "$@"; else "$@"; fi
}

# Every long-running process leads its own session, so its group holds exactly what it started
# (gunicorn's and Celery's children); cleanup signals those groups and nothing else.
declare -a PIDS=()
declare -a NAMES=()
PG_STARTED=0
start() {
  local name=$1; shift
  setsid "$@" >"$LOGS/$name.log" 2>&1 < /dev/null &
  PIDS+=($!)
  NAMES+=("$name")
  log "started $name (pid $!)"
}

cleanup() {
  local status=$?
  trap - EXIT INT TERM
  local index
  for ((index = ${#PIDS[@]} - 1; index >= 0; index--)); do
    kill -TERM -- "-${PIDS[index]}" 2>/dev/null || true
  done
  for _ in $(seq 1 40); do
    local alive=0
    for pid in "${PIDS[@]}"; do kill -0 "$pid" 2>/dev/null && alive=1; done
    ((alive)) || break
    sleep 0.25
  done
  for pid in "${PIDS[@]}"; do kill -KILL -- "-$pid" 2>/dev/null || true; done
  if ((PG_STARTED)); then
    as_postgres "$PG_BIN/pg_ctl" -D "$RUN_DIR/pg/data" -m fast -w stop >/dev/null 2>&1 || true
  fi
  if ((status != 0)); then
    for file in "$LOGS"/*.log; do
      [ -s "$file" ] || continue
      echo "----- last lines of $(basename "$file")" >&2
      tail -n 15 "$file" >&2
    done
  fi
  if [ -n "${LEPUS_TOPOLOGY_KEEP:-}" ]; then
    log "kept $RUN_DIR"
  else
    rm -rf "$RUN_DIR"
  fi
  exit "$status"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

wait_for() {  # wait_for SECONDS WHAT COMMAND...
  local seconds=$1 what=$2; shift 2
  local deadline=$((SECONDS + seconds))
  until "$@" >/dev/null 2>&1; do
    if ((SECONDS >= deadline)); then log "timed out after ${seconds}s waiting for $what"; return 1; fi
    sleep 0.25
  done
}

# Free loopback ports, all taken at once so that no two are the same.
read -r PG_PORT REDIS_PORT S3_PORT WEB1_PORT WEB2_PORT < <("$PY" -c '
import socket
sockets = [socket.socket() for _ in range(5)]
for s in sockets:
    s.bind(("127.0.0.1", 0))
print(*[s.getsockname()[1] for s in sockets])
')

# --- PostgreSQL ---------------------------------------------------------------------------------
mkdir -p "$RUN_DIR/pg/sock"
[ "$(id -u)" = 0 ] && chown -R postgres "$RUN_DIR/pg"
as_postgres "$PG_BIN/initdb" -D "$RUN_DIR/pg/data" -A trust -U postgres --no-sync -E UTF8 \
  >"$LOGS/initdb.log" 2>&1
as_postgres "$PG_BIN/pg_ctl" -D "$RUN_DIR/pg/data" -l "$RUN_DIR/pg/postgres.log" -w -t 60 \
  -o "-p $PG_PORT -k $RUN_DIR/pg/sock -c listen_addresses=127.0.0.1 -c max_connections=200" \
  start >"$LOGS/pg_ctl.log" 2>&1
PG_STARTED=1
PG_PID="$(head -n1 "$RUN_DIR/pg/data/postmaster.pid")"
psql -h 127.0.0.1 -p "$PG_PORT" -U postgres -q -c 'CREATE DATABASE lepus' >/dev/null
log "PostgreSQL on 127.0.0.1:$PG_PORT (pid $PG_PID)"

# --- Redis and S3 -------------------------------------------------------------------------------
start redis redis-server --port "$REDIS_PORT" --bind 127.0.0.1 --save "" --appendonly no \
  --daemonize no --loglevel warning
wait_for 20 "redis" bash -c "[ \"\$(redis-cli -p $REDIS_PORT ping)\" = PONG ]"
start s3 "$BIN/moto_server" -H 127.0.0.1 -p "$S3_PORT"
wait_for 60 "the S3 server" curl -fs -o /dev/null "http://127.0.0.1:$S3_PORT/"

# --- Lepus configuration: production settings, every service of this run ------------------------
export DJANGO_SETTINGS_MODULE=config.settings
export DJANGO_DEBUG=false
DJANGO_SECRET_KEY="$("$PY" -c 'import secrets; print(secrets.token_urlsafe(64))')"
export DJANGO_SECRET_KEY
export DJANGO_ALLOWED_HOSTS=127.0.0.1
export DJANGO_CSRF_TRUSTED_ORIGINS="http://127.0.0.1:$WEB1_PORT,http://127.0.0.1:$WEB2_PORT"
# Plain HTTP on loopback: no redirect to HTTPS, cookies without Secure, no HSTS.
export DJANGO_SECURE_SSL_REDIRECT=false
export DJANGO_SECURE_COOKIES=false
export DJANGO_SECURE_HSTS_SECONDS=0
export DJANGO_BEHIND_TLS_PROXY=false
export DATABASE_URL="postgres://postgres@127.0.0.1:$PG_PORT/lepus"
export CELERY_BROKER_URL="redis://127.0.0.1:$REDIS_PORT/0"
export REDIS_URL="redis://127.0.0.1:$REDIS_PORT/1"
export LEPUS_VAR_DIR="$RUN_DIR/var"
export LEPUS_S3_BUCKET=lepus-topology
export LEPUS_S3_ENDPOINT_URL="http://127.0.0.1:$S3_PORT"
export LEPUS_S3_REGION=us-east-1
export LEPUS_S3_PREFIX=""
export AWS_ACCESS_KEY_ID=topology
export AWS_SECRET_ACCESS_KEY=topology
export LEPUS_TRAINING_DEVICE=cpu
export LEPUS_LOG_LEVEL=INFO
# Simulated workers are closed-loop robots: a person rates a clip in tens of seconds and never
# reaches the per-worker throttles, robots would at once. The throttles still run (in Redis).
export LEPUS_THROTTLE_JOIN=100000/min
export LEPUS_THROTTLE_NEXT=100000/min
export LEPUS_THROTTLE_SUBMIT=100000/min
export LEPUS_THROTTLE_ME=100000/min
# The robots' ids are readable names, not Prolific's 24-hex ids.
export LEPUS_CHECK_WORKER_IDS=false
export PYTHONUNBUFFERED=1
mkdir -p "$LEPUS_VAR_DIR"

"$PY" - <<'EOF'
import os

import boto3

boto3.client(
    "s3", endpoint_url=os.environ["LEPUS_S3_ENDPOINT_URL"], region_name="us-east-1"
).create_bucket(Bucket=os.environ["LEPUS_S3_BUCKET"])
EOF
log "S3 on $LEPUS_S3_ENDPOINT_URL, bucket $LEPUS_S3_BUCKET"

log "migrate, collectstatic"
"$PY" manage.py migrate --noinput >"$LOGS/migrate.log" 2>&1
"$PY" manage.py collectstatic --noinput >"$LOGS/collectstatic.log" 2>&1
CURATOR_PASSWORD="$("$PY" -c 'import secrets; print(secrets.token_urlsafe(18))')"
"$PY" manage.py create_curator --username curator --password="$CURATOR_PASSWORD" \
  >"$LOGS/create_curator.log" 2>&1

# --- Web, workers, beat -------------------------------------------------------------------------
declare -a WEB_PIDS=()
for n in 1 2; do
  port_var="WEB${n}_PORT"
  start "web$n" "$BIN/gunicorn" config.wsgi:application --bind "127.0.0.1:${!port_var}" \
    --workers 2 --worker-class gthread --threads 4 --timeout 120 --keep-alive 75 \
    --access-logfile "$LOGS/web$n-access.log" --access-logformat '%(s)s %(m)s %(U)s %(M)s'
  WEB_PIDS+=("${PIDS[-1]}")
done
start worker-default "$BIN/celery" -A config worker -Q default -n default@topology \
  --concurrency 1 --without-gossip --without-mingle --loglevel INFO
start worker-training "$BIN/celery" -A config worker -Q training -n training@topology \
  --concurrency 1 --without-gossip --without-mingle --loglevel INFO
start beat "$BIN/celery" -A config beat --loglevel INFO --pidfile=
wait_for 60 "web server 1" curl -fs -o /dev/null "http://127.0.0.1:$WEB1_PORT/healthz"
wait_for 60 "web server 2" curl -fs -o /dev/null "http://127.0.0.1:$WEB2_PORT/healthz"
wait_for 120 "the default worker" grep -q "default@topology ready" "$LOGS/worker-default.log"
wait_for 120 "the training worker" grep -q "training@topology ready" "$LOGS/worker-training.log"
wait_for 60 "celery beat" grep -q "beat: Starting" "$LOGS/beat.log"
STARTUP_SECONDS=$("$PY" -c "import time; print(round(time.time() - $STARTED, 2))")
log "all up in ${STARTUP_SECONDS}s: web http://127.0.0.1:$WEB1_PORT and http://127.0.0.1:$WEB2_PORT"

# --- The flow -----------------------------------------------------------------------------------
"$PY" bench/topology_flow.py \
  --web "http://127.0.0.1:$WEB1_PORT" --web "http://127.0.0.1:$WEB2_PORT" \
  --web-pid "${WEB_PIDS[0]}" --web-pid "${WEB_PIDS[1]}" --db-pid "$PG_PID" \
  --db-dsn "host=127.0.0.1 port=$PG_PORT dbname=lepus user=postgres" \
  --redis-port "$REDIS_PORT" \
  --curator curator --curator-password="$CURATOR_PASSWORD" \
  --run-dir "$RUN_DIR" --logs "$LOGS" --startup-seconds "$STARTUP_SECONDS" "$@"
