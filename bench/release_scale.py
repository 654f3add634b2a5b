"""Releases at scale: build a Vid-Lepus release of about 1,000,000 judgments and report the wall
time and the peak memory of the build process.

    flock /tmp/lepus-bench.lock /work/main/.venv/bin/python bench/release_scale.py \
        --judgments 1000000 [--raw] [--keep]

It creates a scratch PostgreSQL database beside the one in DATABASE_URL (`<name>_bench_release`),
migrates it, fills it with COPY (clips with 9 references, 6 candidates per clip, 3 judgments per
candidate on the three default questions, aggregates consistent with the judgments, one excluded
worker), then runs the build in a fresh child process: `release_create` + `release_build` inline,
the same code a Celery worker runs. The child reports the job's own duration (started_at to
finished_at), its wall time and its peak RSS (`resource.getrusage(RUSAGE_SELF).ru_maxrss`), checks
the row counts of all three formats and re-verifies the files. The scratch database and media
folder are dropped at the end unless --keep is given.
"""

from __future__ import annotations

import argparse
import io
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path
from urllib.parse import urlparse, urlunparse

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "bench"))

from provenance import cpu_seconds_of, write_raw  # noqa: E402  (Django-free)

CANDIDATES_PER_CLIP = 6
REFERENCES_PER_CLIP = 9
QUOTA = 3
KEYS = ("descriptiveness", "relevance", "fluency")
BENCH_SECRET = "bench-release-scale-" + "x" * 48


def _environment(database_url: str, media_root: str) -> dict[str, str]:
    env = dict(os.environ)
    env.update(
        {
            "DATABASE_URL": database_url,
            "DJANGO_SETTINGS_MODULE": "config.settings",
            "DJANGO_SECRET_KEY": BENCH_SECRET,
            "DJANGO_DEBUG": "false",
            "LEPUS_MEDIA_ROOT": media_root,
            # The child builds inline; nothing may reach a real worker.
            "CELERY_BROKER_URL": "memory://",
            "LEPUS_S3_BUCKET": "",
            "LEPUS_CODE_VERSION": "bench",
            "LEPUS_LOG_LEVEL": "INFO",
        }
    )
    return env


def _admin_connection(database_url: str):  # type: ignore[no-untyped-def]
    import psycopg2

    parsed = urlparse(database_url)
    connection = psycopg2.connect(
        host=parsed.hostname or "127.0.0.1",
        port=parsed.port or 5432,
        user=parsed.username or "postgres",
        password=parsed.password or None,
        dbname="postgres",
    )
    connection.autocommit = True
    return connection


def _words(rng, count: int) -> list[str]:  # type: ignore[no-untyped-def]
    syllables = ["ba", "ko", "ri", "te", "mu", "sa", "lo", "ne", "di", "fu", "ga", "pi", "zo", "we"]
    words = set()
    while len(words) < count:
        words.add("".join(rng.choice(syllables, size=rng.integers(1, 5))))
    return sorted(words)


class CopyBuffer:
    """Rows to COPY, flushed every few MB so generation memory stays small."""

    def __init__(self, cursor, table: str, columns: list[str]) -> None:  # type: ignore[no-untyped-def]
        self.cursor, self.table, self.columns = cursor, table, columns
        self.buffer = io.StringIO()
        self.rows = 0

    def add(self, *values: object) -> None:
        self.buffer.write("\t".join(_copy_text(value) for value in values))
        self.buffer.write("\n")
        self.rows += 1
        if self.buffer.tell() > 8 * 1024 * 1024:
            self.flush()

    def flush(self) -> None:
        if self.buffer.tell():
            self.buffer.seek(0)
            self.cursor.copy_expert(
                f"COPY {self.table} ({', '.join(self.columns)}) FROM STDIN", self.buffer
            )
            self.buffer = io.StringIO()


def _copy_text(value: object) -> str:
    if value is None:
        return "\\N"
    if value is True:
        return "t"
    if value is False:
        return "f"
    return str(value)


def generate(database_url: str, *, judgments: int, seed: int) -> dict[str, int]:
    import numpy as np
    import psycopg2

    rng = np.random.default_rng(seed)
    candidates = -(-judgments // QUOTA)
    clips = -(-candidates // CANDIDATES_PER_CLIP)
    workers = 2000
    now = datetime(2026, 1, 1, tzinfo=UTC).isoformat()
    vocabulary = np.array(_words(rng, 3000))
    questions = json.dumps([{"key": key, "label": key.title(), "help": ""} for key in KEYS])

    connection = psycopg2.connect(database_url)
    cursor = connection.cursor()
    cursor.execute(
        "INSERT INTO annotation_campaign (id, slug, name, description, instructions, status,"
        " questions, overall_question_key, judgments_per_candidate, reference_free,"
        " lease_seconds, min_seconds_on_clip, control_rate, control_settings, qc_rules,"
        " review_range_threshold, pay_per_assignment, currency, completion_code, redirect_url,"
        " is_imported, selection, created_at, updated_at) VALUES (1, 'bench', 'Bench', '', '',"
        " 'closed', %s, '', %s, false, 900, 0, 0, '{}', '{\"too_fast\": {\"enabled\": true}}',"
        " 3, 0, 'GBP', '', '', false, '{}', %s, %s)",
        [questions, QUOTA, now, now],
    )
    cursor.execute(
        "INSERT INTO datasets_app_captioningsystem (id, name, version, description, created_at)"
        " SELECT g, 'system-' || g, '1.0', '', %s FROM generate_series(1, 8) g",
        [now],
    )
    worker_rows = CopyBuffer(
        cursor, "annotation_worker", ["id", "platform", "external_id", "created_at"]
    )
    participation_rows = CopyBuffer(
        cursor,
        "annotation_participation",
        [
            "id",
            "campaign_id",
            "worker_id",
            "status",
            "platform_data",
            "joined_at",
            "assignments_submitted",
            "active_ms_total",
        ],
    )
    for worker in range(1, workers + 1):
        worker_rows.add(worker, "prolific", f"PROLIFIC{worker:08d}", now)
        status = "excluded" if worker == workers else "active"
        participation_rows.add(worker, 1, worker, status, "{}", now, 0, 0)
    worker_rows.flush()
    participation_rows.flush()
    cursor.execute(
        "INSERT INTO annotation_workerexclusion (participation_id, rules, detail,"
        " judgments_excluded, created_at) VALUES (%s, '[\"too_fast\"]', '{}', 0, %s)",
        [workers, now],
    )

    clip_rows = CopyBuffer(
        cursor,
        "datasets_app_clip",
        [
            "id",
            "vatex_id",
            "youtube_id",
            "start_seconds",
            "end_seconds",
            "source_key",
            "video_key",
            "poster_key",
            "frames_key",
            "frame_count",
            "duration",
            "status",
            "error_reason",
            "created_at",
        ],
    )
    reference_rows = CopyBuffer(
        cursor, "datasets_app_referencecaption", ["clip_id", "position", "text", "language"]
    )
    candidate_rows = CopyBuffer(
        cursor,
        "datasets_app_candidatecaption",
        [
            "id",
            "clip_id",
            "external_id",
            "text",
            "system_id",
            "kind",
            "control_type",
            "control_spec",
            "position",
            "created_at",
        ],
    )
    item_rows = CopyBuffer(
        cursor,
        "annotation_campaigncandidate",
        [
            "id",
            "campaign_id",
            "candidate_id",
            "clip_id",
            "quota",
            "slots_taken",
            "is_control",
            "judgments_total",
            "kept_judgments",
            "means",
            "overall",
            "normalized",
            "training_class",
            "rating_range",
            "is_finalised",
            "review_state",
            "resolution",
            "dropped",
        ],
    )
    judgment_rows = CopyBuffer(
        cursor,
        "annotation_judgment",
        [
            "campaign_id",
            "campaign_candidate_id",
            "participation_id",
            "values",
            "reason",
            "source",
            "server_ms",
            "created_at",
            "is_excluded",
            "excluded_by",
            "exclusion_reason",
            "exclusion_detail",
        ],
    )

    def sentences(count: int, low: int, high: int) -> list[str]:
        lengths = rng.integers(low, high, size=count)
        words = vocabulary[rng.integers(0, len(vocabulary), size=int(lengths.sum()))].tolist()
        out, cursor_at = [], 0
        for length in lengths.tolist():
            out.append(" ".join(words[cursor_at : cursor_at + length]))
            cursor_at += length
        return out

    made_judgments = 0
    excluded_worker = workers  # the last worker is excluded by QC
    chunk = 5000
    for first_clip in range(1, clips + 1, chunk):
        clip_numbers = list(range(first_clip, min(first_clip + chunk, clips + 1)))
        references = sentences(len(clip_numbers) * REFERENCES_PER_CLIP, 8, 16)
        for offset, clip in enumerate(clip_numbers):
            youtube = f"yt{clip:09d}"
            clip_rows.add(
                clip,
                f"{youtube}_{clip % 500:06d}_{clip % 500 + 10:06d}",
                youtube,
                float(clip % 500),
                float(clip % 500 + 10),
                "",
                f"clips/{clip}.mp4",
                "",
                f"frames/{clip}",
                8,
                10.0,
                "ready",
                "",
                now,
            )
            for position in range(REFERENCES_PER_CLIP):
                reference_rows.add(
                    clip, position, references[offset * REFERENCES_PER_CLIP + position], "en"
                )
        first_candidate = (first_clip - 1) * CANDIDATES_PER_CLIP + 1
        last_candidate = min(clip_numbers[-1] * CANDIDATES_PER_CLIP, candidates)
        count = last_candidate - first_candidate + 1
        texts = sentences(count, 6, 16)
        systems = rng.integers(1, 9, size=count).tolist()
        first = rng.integers(0, workers, size=count)
        step_a = rng.integers(1, workers // 2, size=count)
        step_b = rng.integers(1, workers // 2, size=count)
        raters = (
            np.stack([first, (first + step_a) % workers, (first + step_a + step_b) % workers], 1)
            + 1
        )
        # A quality per candidate, a bias per rater and noise per question: alpha around 0.5.
        quality = rng.integers(1, 6, size=(count, 1, 1))
        bias = rng.integers(-1, 2, size=(count, QUOTA, 1))
        noise = rng.integers(-1, 2, size=(count, QUOTA, len(KEYS))) * (
            rng.random(size=(count, QUOTA, len(KEYS))) < 0.3
        )
        values = np.clip(quality + bias + noise, 1, 5)
        for index in range(count):
            candidate_id = first_candidate + index
            clip = (candidate_id - 1) // CANDIDATES_PER_CLIP + 1
            position = (candidate_id - 1) % CANDIDATES_PER_CLIP
            candidate_rows.add(
                candidate_id,
                clip,
                f"bench:{clip}:{position}",
                texts[index],
                systems[index],
                "model",
                "",
                "{}",
                position,
                now,
            )
            row_raters = raters[index].tolist()
            row_values = values[index]
            kept = [slot for slot in range(QUOTA) if row_raters[slot] != excluded_worker]
            kept_values = row_values[kept] if kept else row_values
            means = {key: float(kept_values[:, q].mean()) for q, key in enumerate(KEYS)}
            overall = sum(means.values()) / len(KEYS)
            value_lists = row_values.tolist()
            for slot in range(QUOTA):
                excluded = row_raters[slot] == excluded_worker
                judgment_rows.add(
                    1,
                    candidate_id,
                    row_raters[slot],
                    json.dumps(dict(zip(KEYS, value_lists[slot], strict=True))),
                    "",
                    "crowd",
                    15000,
                    now,
                    excluded,
                    "rule:too_fast" if excluded else "",
                    "too fast" if excluded else "",
                    "{}",
                )
                made_judgments += 1
            item_rows.add(
                candidate_id,
                1,
                candidate_id,
                clip,
                QUOTA,
                QUOTA,
                False,
                QUOTA,
                len(kept),
                json.dumps(means),
                overall,
                (overall - 1) / 4,
                int(overall + 0.5),
                int(row_values.max() - row_values.min()),
                len(kept) == QUOTA,
                "",
                "{}",
                False,
            )
    for buffer in (clip_rows, reference_rows, candidate_rows, item_rows, judgment_rows):
        buffer.flush()
    for table in (
        "annotation_campaign",
        "annotation_worker",
        "annotation_participation",
        "datasets_app_clip",
        "datasets_app_referencecaption",
        "datasets_app_candidatecaption",
        "datasets_app_captioningsystem",
        "annotation_campaigncandidate",
        "annotation_judgment",
    ):
        cursor.execute(
            f"SELECT setval(pg_get_serial_sequence('{table}', 'id'), (SELECT max(id) FROM {table}))"
        )
    connection.commit()
    connection.autocommit = True
    cursor.execute("VACUUM ANALYZE")
    connection.close()
    return {
        "clips": clips,
        "candidates": candidates,
        "judgments": made_judgments,
        "references": clips * REFERENCES_PER_CLIP,
    }


def child_build(*, raw: bool) -> None:
    """Run in the child process: create and build the release inline, report, verify."""
    import resource

    import django

    django.setup()
    # The PostgreSQL backend's CPU time (same machine): the other half of the work.
    from contextlib import contextmanager

    import pyarrow.parquet as pq
    from django.conf import settings

    from annotation.models import Campaign
    from export.models import Release
    from export.reads import sql_snapshot as snapshot
    from export.services import release_build, release_create, release_verify

    backend: dict[str, float] = {}
    original_open = snapshot.open_snapshot

    @contextmanager
    def measured_snapshot(**arguments):  # type: ignore[no-untyped-def]
        with original_open(**arguments) as opened:
            pid = opened.cursor_factory.get_backend_pid()
            start = cpu_seconds_of(pid)
            yield opened
            backend["cpu"] = cpu_seconds_of(pid) - start

    snapshot.open_snapshot = measured_snapshot
    release = release_create(
        campaigns=[Campaign.objects.get(slug="bench")],
        seed=1,
        ratios=(0.8, 0.1, 0.1),
        include_raw_judgments=raw,
    )
    started = time.perf_counter()
    release_build(release_id=release.pk)
    wall = time.perf_counter() - started
    usage = resource.getrusage(resource.RUSAGE_SELF)
    peak_kib = usage.ru_maxrss
    release = Release.objects.get(pk=release.pk)
    job_seconds = (release.finished_at - release.started_at).total_seconds()
    root = Path(settings.MEDIA_ROOT) / release.storage_prefix
    rows = {}
    for split in release.split_names:
        with open(root / f"data/{split}.jsonl", "rb") as handle:
            jsonl = sum(1 for _ in handle)
        with open(root / f"csv/{split}.csv", "rb") as handle:
            csv_rows = sum(1 for _ in handle) - 1
        parquet = pq.ParquetFile(root / f"parquet/{split}.parquet").metadata.num_rows
        rows[split] = {"jsonl": jsonl, "csv": csv_rows, "parquet": parquet}
    verified = release_verify(release=release)
    print(
        json.dumps(
            {
                "status": release.status,
                "error": release.error,
                "job_seconds": round(job_seconds, 2),
                "build_wall_seconds": round(wall, 2),
                "peak_rss_mib": round(peak_kib / 1024, 1),
                "process_cpu_seconds": round(usage.ru_utime + usage.ru_stime, 2),
                "postgres_backend_cpu_seconds": round(backend.get("cpu", float("nan")), 2),
                "rows": rows,
                "released": release.counts.get("released"),
                "judgments": release.stats.get("judgments"),
                "bytes": release.total_bytes,
                "files": {path: (root / path).stat().st_size for path in release.files},
                "verified": verified["ok"],
                "alpha": {key: entry["alpha"] for key, entry in release.stats["agreement"].items()},
            }
        )
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--judgments", type=int, default=1_000_000)
    parser.add_argument("--raw", action="store_true", help="include the raw kept judgments")
    parser.add_argument("--keep", action="store_true", help="keep the scratch database")
    parser.add_argument("--reuse", action="store_true", help="reuse a kept scratch database")
    parser.add_argument("--child-build", action="store_true", help=argparse.SUPPRESS)
    arguments = parser.parse_args()
    if arguments.child_build:
        child_build(raw=arguments.raw)
        return

    from config.env import load_dotenv_file

    load_dotenv_file(str(REPO / ".env"))
    base_url = os.environ.get("DATABASE_URL", "postgres://postgres@127.0.0.1:5432/lepus")
    parsed = urlparse(base_url)
    scratch = f"{parsed.path.lstrip('/')}_bench_release"
    if arguments.judgments != 1_000_000:
        scratch += f"_{arguments.judgments}"
    database_url = urlunparse(parsed._replace(path=f"/{scratch}"))
    media_root = tempfile.mkdtemp(prefix="lepus-bench-release-")
    env = _environment(database_url, media_root)
    admin = _admin_connection(base_url)
    generated: dict[str, int] = {}
    try:
        if not arguments.reuse:
            with admin.cursor() as cursor:
                cursor.execute(f'DROP DATABASE IF EXISTS "{scratch}"')
                cursor.execute(f'CREATE DATABASE "{scratch}"')
            subprocess.run(
                [sys.executable, "manage.py", "migrate", "--noinput", "-v", "0"],
                cwd=REPO,
                env=env,
                check=True,
            )
            started = time.perf_counter()
            generated = generate(database_url, judgments=arguments.judgments, seed=42)
            generated["seconds"] = round(time.perf_counter() - started, 1)
            print(f"generated {generated}", file=sys.stderr)
        child = subprocess.run(
            [sys.executable, __file__, "--child-build", *(["--raw"] if arguments.raw else [])],
            cwd=REPO,
            env=env,
            check=True,
            capture_output=True,
            text=True,
        )
        for line in child.stderr.splitlines():  # the build's phase timings
            if "export." in line:
                print(line, file=sys.stderr)
        result = json.loads(child.stdout.strip().splitlines()[-1])
        result["generated"] = generated
        result["machine"] = f"{platform.node()}, {os.cpu_count()} cores"
        result["raw_judgments"] = arguments.raw
        write_raw("release_scale", result, database=database_url)
        print(json.dumps(result, indent=2))
    finally:
        if not arguments.keep:
            with admin.cursor() as cursor:
                cursor.execute(f'DROP DATABASE IF EXISTS "{scratch}" WITH (FORCE)')
        subprocess.run(["rm", "-rf", media_root], check=False)
        admin.close()


if __name__ == "__main__":
    main()
