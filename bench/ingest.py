"""Ingest benchmark: the full VATEX-EVAL import (and its no-op re-import) into a fresh scratch
PostgreSQL database, and the video pipeline on N synthetic clips, run in this process.

    flock /tmp/lepus-bench.lock python bench/ingest.py [--runs 3] [--clips 6] [--keep]

The scratch database is `<DATABASE_URL's database>_bench_ingest` on the same server, made afresh
for each run (dropped at the end unless --keep). Prints one JSON object (every run, and the median,
min and max of each figure) and writes it as a raw file under bench/results/ (bench/provenance.py).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any
from urllib.parse import urlparse, urlunparse

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "bench"))

from provenance import input_checksums, summarise_runs, write_raw  # noqa: E402


def scratch_url(base: str) -> tuple[str, str, str]:
    parsed = urlparse(base)
    if not parsed.scheme.startswith("postgres"):
        raise SystemExit("bench/ingest.py needs a PostgreSQL DATABASE_URL")
    name = parsed.path.lstrip("/") + "_bench_ingest"
    admin = urlunparse(parsed._replace(path="/postgres"))
    return urlunparse(parsed._replace(path=f"/{name}")), admin, name


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--clips", type=int, default=6, help="clips through the video pipeline")
    parser.add_argument("--keep", action="store_true", help="keep the scratch database")
    parser.add_argument("--runs", type=int, default=3, help="runs, each on a fresh database")
    arguments = parser.parse_args()
    # checked before anything is measured: a missing file stops the benchmark here
    inputs = input_checksums(vatex_eval=REPO / "data" / "vatex_eval" / "vid_cans_score_dict.json")

    from config.env import load_dotenv_file

    load_dotenv_file(str(REPO / ".env"))
    base = os.environ.get("DATABASE_URL", "postgres://postgres@127.0.0.1:5432/lepus")
    url, admin_url, name = scratch_url(base)

    import psycopg2

    if arguments.runs < 1:
        parser.error("--runs must be at least 1")
    admin = psycopg2.connect(admin_url)
    admin.autocommit = True

    def fresh_database() -> None:
        with admin.cursor() as cursor:
            cursor.execute(f'DROP DATABASE IF EXISTS "{name}"')
            cursor.execute(f'CREATE DATABASE "{name}"')

    fresh_database()
    os.environ["DATABASE_URL"] = url
    os.environ.setdefault("DJANGO_DEBUG", "true")
    os.environ["LEPUS_VAR_DIR"] = tempfile.mkdtemp(prefix="lepus-bench-ingest-")
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")

    import django

    django.setup()
    from django.core.management import call_command
    from django.db import connections

    runs: list[dict[str, object]] = []
    try:
        for run in range(arguments.runs):
            if run:
                connections.close_all()
                fresh_database()
            runs.append(one_run(arguments, call_command))
            print(f"[ingest] run {run + 1} of {arguments.runs} done", file=sys.stderr)
    finally:
        connections.close_all()
        if not arguments.keep:
            with admin.cursor() as cursor:
                cursor.execute(f'DROP DATABASE IF EXISTS "{name}"')
        admin.close()
    report = {
        "database": name,
        "settings": {"clips": arguments.clips, "runs": arguments.runs},
        "summary": summarise_runs(runs),
        "runs": runs,
    }
    path = write_raw(
        "ingest",
        report,
        database=base,
        inputs=inputs,
    )
    report["raw_file"] = str(path)
    print(json.dumps(report, indent=2, sort_keys=True))


def one_run(arguments: argparse.Namespace, call_command: Any) -> dict[str, object]:
    """Migrate the fresh scratch database, import VATEX-EVAL twice, run the video pipeline."""
    results: dict[str, object] = {}
    call_command("migrate", verbosity=0)
    from annotation.imports import vatex_eval_import
    from annotation.selectors import platform_stats
    from datasets_app.models import Clip
    from datasets_app.services.video import (
        demo_videos_make,
        video_attach_job_create,
        video_attach_job_run,
    )

    path = REPO / "data" / "vatex_eval" / "vid_cans_score_dict.json"
    started, cpu = time.perf_counter(), time.process_time()
    first = vatex_eval_import(path=path)
    results["import_seconds"] = round(time.perf_counter() - started, 2)
    results["import_cpu_seconds"] = round(time.process_time() - cpu, 2)
    results["import_created"] = first.created
    started = time.perf_counter()
    again = vatex_eval_import(path=path)
    results["reimport_seconds"] = round(time.perf_counter() - started, 3)
    results["reimport_changed_nothing"] = again.already_imported and not any(again.created.values())
    stats = platform_stats()
    results["stats"] = {
        key: stats[key] for key in ("clips", "references", "candidates", "judgments")
    }

    if arguments.clips:
        folder = Path(tempfile.mkdtemp(prefix="lepus-bench-videos-"))
        started = time.perf_counter()
        demo_videos_make(directory=folder, clips=arguments.clips, seconds=10.0, height=360)
        results["synthesise_seconds_per_clip"] = round(
            (time.perf_counter() - started) / arguments.clips, 2
        )
        job, _ = video_attach_job_create(directory=folder)
        assert job is not None
        started = time.perf_counter()
        video_attach_job_run(job_id=job.pk)
        elapsed = time.perf_counter() - started
        job.refresh_from_db()
        results["pipeline_clips"] = job.total
        results["pipeline_ready"] = job.ready
        results["pipeline_seconds_per_clip"] = round(elapsed / job.total, 2)
        results["pipeline_clip_seconds"] = 10.0
        results["pipeline_output_height"] = Clip.objects.servable().first().height
    return results


if __name__ == "__main__":
    main()
