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

# A failed step says so on the terminal with the end of its log, not only in the log file.
fail() {
  local what=$1 log=$2
  echo "" >&2
  echo "ERROR: $what failed. The end of $log:" >&2
  tail -n 25 "$log" | sed 's/^/  | /' >&2
  exit 1
}

echo "==> Migrating the demo database ($DATABASE_URL)"
$PY manage.py migrate --noinput >"$LOG_DIR/migrate.log" 2>&1 || fail "Migrating the database" "$LOG_DIR/migrate.log"

echo "==> Starting a Celery worker (filesystem broker, log: $LOG_DIR/celery.log)"
$CELERY -A config worker -Q default,training --beat --concurrency=2 --loglevel=INFO \
  --schedule "$LEPUS_VAR_DIR/celerybeat-schedule" >"$LOG_DIR/celery.log" 2>&1 &
pids+=($!)

echo "==> Seeding demo data (drawn scenes and their crowd campaign, a VATEX-EVAL slice, curator)"
$PY manage.py seed_demo --json >"$LEPUS_VAR_DIR/seed.json" 2> >(tee "$LOG_DIR/seed.log" >&2) \
  || fail "Seeding the demo data" "$LOG_DIR/seed.log"
kill -0 "${pids[0]}" 2>/dev/null || fail "The Celery worker" "$LOG_DIR/celery.log"
CURATOR_PASSWORD="$($PY -c "import json,sys; print(json.load(open(sys.argv[1]))['curator_password'])" "$LEPUS_VAR_DIR/seed.json")"
CAMPAIGN="$($PY -c "import json,sys; print(json.load(open(sys.argv[1]))['campaign'])" "$LEPUS_VAR_DIR/seed.json")"

echo "==> Starting the web server on http://127.0.0.1:$PORT"
$PY manage.py runserver "127.0.0.1:$PORT" --noreload >"$LOG_DIR/web.log" 2>&1 &
pids+=($!)
web_up=0
for _ in $(seq 1 60); do
  curl -fs -o /dev/null "http://127.0.0.1:$PORT/healthz" 2>/dev/null && { web_up=1; break; }
  kill -0 "${pids[1]}" 2>/dev/null || break
  sleep 0.5
done
((web_up)) || fail "Starting the web server" "$LOG_DIR/web.log"

WORKER_URL="http://127.0.0.1:$PORT/w/$CAMPAIGN/?PROLIFIC_PID=5f0c0ffee0ddba11c0ffee01&STUDY_ID=demo-study&SESSION_ID=demo-session-1"
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
  check 302 "http://127.0.0.1:$PORT/favicon.ico"
  $PY manage.py stats --json
  exit "$failures"
fi
wait
