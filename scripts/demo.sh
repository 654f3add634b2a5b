#!/usr/bin/env bash
# `make demo`: Lepus with demo data on embedded defaults — a SQLite file, local storage and a
# filesystem Celery broker under var/demo/, a real Celery worker process, and the web server.
#
#   scripts/demo.sh            bring it up and keep serving until Ctrl-C
#   scripts/demo.sh --smoke    bring it up, check the pages answer, shut down (used by CI)
set -euo pipefail
cd "$(dirname "$0")/.."

PY=.venv/bin/python
CELERY=.venv/bin/celery
PORT="${LEPUS_DEMO_PORT:-8000}"
SMOKE=0
[[ "${1:-}" == "--smoke" ]] && SMOKE=1

command -v ffmpeg >/dev/null || { echo "ffmpeg is required for the demo videos (apt-get install ffmpeg)" >&2; exit 1; }

# Embedded defaults, explicitly: whatever a .env says, the demo stays on its own files.
export DJANGO_DEBUG=1
export LEPUS_VAR_DIR="$PWD/var/demo"
export DATABASE_URL="sqlite:///$LEPUS_VAR_DIR/lepus.sqlite3"
export CELERY_BROKER_URL="filesystem://"
export LEPUS_S3_BUCKET=""
export DJANGO_ALLOWED_HOSTS="localhost,127.0.0.1,[::1]"
export PYTHONUNBUFFERED=1
mkdir -p "$LEPUS_VAR_DIR"
LOG_DIR="$LEPUS_VAR_DIR/logs"
mkdir -p "$LOG_DIR"

pids=()
cleanup() {
  for pid in "${pids[@]}"; do kill "$pid" 2>/dev/null || true; done
  wait 2>/dev/null || true
}
trap cleanup EXIT INT TERM

echo "==> Migrating the demo database ($DATABASE_URL)"
$PY manage.py migrate --noinput >"$LOG_DIR/migrate.log"

echo "==> Starting a Celery worker (filesystem broker, log: $LOG_DIR/celery.log)"
$CELERY -A config worker -Q default,training --beat --concurrency=2 --loglevel=INFO \
  --schedule "$LEPUS_VAR_DIR/celerybeat-schedule" >"$LOG_DIR/celery.log" 2>&1 &
pids+=($!)

echo "==> Seeding demo data (VATEX-EVAL slice, synthetic videos, campaign, curator)"
$PY manage.py seed_demo --json >"$LEPUS_VAR_DIR/seed.json"
CURATOR_PASSWORD="$($PY -c "import json,sys; print(json.load(open(sys.argv[1]))['curator_password'])" "$LEPUS_VAR_DIR/seed.json")"
CAMPAIGN="$($PY -c "import json,sys; print(json.load(open(sys.argv[1]))['campaign'])" "$LEPUS_VAR_DIR/seed.json")"

echo "==> Starting the web server on http://127.0.0.1:$PORT"
$PY manage.py runserver "127.0.0.1:$PORT" --noreload >"$LOG_DIR/web.log" 2>&1 &
pids+=($!)
for _ in $(seq 1 60); do
  curl -fs -o /dev/null "http://127.0.0.1:$PORT/healthz" 2>/dev/null && break
  sleep 0.5
done

WORKER_URL="http://127.0.0.1:$PORT/w/$CAMPAIGN/?PROLIFIC_PID=demo-worker-1&STUDY_ID=demo-study&SESSION_ID=demo-session-1"
cat <<EOF

Lepus demo is running.
  Worker page (a Prolific worker):  $WORKER_URL
  Curator dashboard:                http://127.0.0.1:$PORT/dashboard/
  Django admin:                     http://127.0.0.1:$PORT/admin/
  OpenAPI schema:                   http://127.0.0.1:$PORT/api/schema/
  Curator login:                    curator / $CURATOR_PASSWORD
  Data, logs and media:             $LEPUS_VAR_DIR
Press Ctrl-C to stop.
EOF

if ((SMOKE)); then
  status() { curl -s -o /dev/null -w '%{http_code}' "$@"; }
  failures=0
  check() { local want=$1 url=$2 got; got=$(status "$url"); echo "  $got $url"; [[ "$got" == "$want" ]] || failures=$((failures + 1)); }
  echo "==> Smoke check"
  check 200 "http://127.0.0.1:$PORT/healthz"
  check 200 "$WORKER_URL"
  check 302 "http://127.0.0.1:$PORT/dashboard/"
  check 200 "http://127.0.0.1:$PORT/accounts/login/"
  check 200 "http://127.0.0.1:$PORT/api/schema/"
  $PY manage.py stats --json
  exit "$failures"
fi
wait
