"""The benchmarks' shared plumbing: their own PostgreSQL database, Django in a child process, and
a campaign world generated inside PostgreSQL (INSERT ... SELECT FROM generate_series: set-based,
no Python rows).

    from worlds import bench_database_url, campaign_skeleton, insert_select, run_child

`qc_scale.py` and `calibration_scale.py` build the same skeleton (clips of three candidates, one
campaign candidate and campaign clip each, workers with one participation each) and differ only
in how the judgments are drawn, which each writes itself with `insert_select`.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent


def bench_database_url(suffix: str, script: str) -> str:
    """`<DATABASE_URL's database>_<suffix>`: a benchmark never writes into the working database."""
    from config.env import load_dotenv_file

    load_dotenv_file(str(ROOT / ".env"))
    base = os.environ.get("DATABASE_URL", "postgres://postgres@127.0.0.1:5432/lepus")
    if not base.startswith("postgres"):
        raise SystemExit(f"bench/{script} needs PostgreSQL (DATABASE_URL=postgres://...)")
    head, _, name = base.rpartition("/")
    return f"{head}/{name.split('?')[0]}_{suffix}"


def setup_django(database_url: str) -> None:
    os.environ["DATABASE_URL"] = database_url
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")
    os.environ.setdefault("DJANGO_DEBUG", "true")
    import django

    django.setup()


def ensure_database(database_url: str) -> None:
    import psycopg2

    head, _, name = database_url.rpartition("/")
    admin = psycopg2.connect(f"{head}/postgres")
    admin.autocommit = True
    with admin.cursor() as cursor:
        cursor.execute("SELECT 1 FROM pg_database WHERE datname = %s", [name])
        if cursor.fetchone() is None:
            cursor.execute(f'CREATE DATABASE "{name}"')
    admin.close()


def run_child(script: str, database_url: str, mode: str, *extra: str) -> dict[str, Any]:
    """Run `script --child mode` in a fresh process (its own peak RSS) and return its JSON line."""
    output = subprocess.run(
        [sys.executable, script, "--child", mode, "--database-url", database_url, *extra],
        capture_output=True,
        text=True,
        cwd=str(ROOT),
    )
    if output.returncode != 0:
        sys.stderr.write(output.stderr)
        raise SystemExit(f"the {mode} step failed")
    return json.loads(output.stdout.strip().splitlines()[-1])


def load_unless_loaded(
    script: str, database_url: str, *, judgments: int, reload: bool, load_arguments: list[str]
) -> dict[str, Any] | None:
    """Create the database if needed and (re)load the world unless it already holds the expected
    judgments (the script's `--child count`); returns the load's figures, None when reused."""
    ensure_database(database_url)
    current = None
    if not reload:
        try:
            current = run_child(script, database_url, "count")["judgments"]
        except SystemExit:
            current = None
    if not reload and current == (judgments // 9) * 9:
        return None
    return run_child(script, database_url, "load", "--judgments", str(judgments), *load_arguments)


def insert_select(model: Any, expressions: dict[str, str], source: str, params: list[Any]) -> int:
    """INSERT INTO model (...) SELECT ... FROM source; columns not given get the model default."""
    from django.db import connection

    columns, values, literal_params = [], [], []
    for field in model._meta.concrete_fields:
        if field.primary_key:
            continue
        columns.append(f'"{field.column}"')
        if field.attname in expressions:
            values.append(expressions[field.attname])
        elif field.has_default():
            default = field.get_default()
            if isinstance(default, (dict, list)):
                values.append("%s::jsonb")
                literal_params.append(json.dumps(default))
            else:
                values.append("%s")
                literal_params.append(default)
        elif field.null:
            values.append("NULL")
        else:
            raise RuntimeError(f"{model.__name__}.{field.name} needs a value")
    # Literal defaults come first in the SELECT list, the source's own parameters after.
    sql = (
        f"INSERT INTO {model._meta.db_table} ({', '.join(columns)}) "
        f"SELECT {', '.join(values)} FROM {source}"
    )
    with connection.cursor() as cursor:
        cursor.execute(sql, literal_params + params)
        return cursor.rowcount


def campaign_skeleton(
    *,
    campaign_fields: dict[str, Any],
    judgments: int,
    workers: int,
    systems: int,
    prefix: str,
    seed: float,
) -> tuple[Any, int]:
    """Empty the crowd tables, then create one campaign over `judgments / 9` clips of three
    candidates (each wanting three judgments, all slots taken) and `workers` workers who joined.

    Returns the campaign and the number of candidates. Candidate ids run 1..candidates and
    participation ids 1..workers (RESTART IDENTITY), which the judgment generators rely on.
    """
    from django.core.management import call_command
    from django.db import connection

    from annotation.models import (
        Campaign,
        CampaignCandidate,
        CampaignClip,
        Judgment,
        Participation,
        Worker,
    )
    from annotation.questions import default_questions
    from datasets_app.models import CandidateCaption, CaptioningSystem, Clip

    call_command("migrate", verbosity=0)
    clips = judgments // 9
    candidates = clips * 3
    with connection.cursor() as cursor:
        tables = [
            model._meta.db_table
            for model in (Judgment, CampaignCandidate, CampaignClip, Participation, Worker)
        ]
        cursor.execute(
            "TRUNCATE "
            + ", ".join(tables)
            + f", {Campaign._meta.db_table}, {CandidateCaption._meta.db_table}, "
            f"{Clip._meta.db_table}, {CaptioningSystem._meta.db_table} RESTART IDENTITY CASCADE"
        )
        cursor.execute("SELECT setseed(%s)", [seed])
    campaign = Campaign.objects.create(questions=default_questions(), **campaign_fields)
    created = [CaptioningSystem.objects.create(name=f"system-{index}") for index in range(systems)]
    first_system = created[0]
    insert_select(
        Clip,
        {
            "vatex_id": f"'{prefix}' || lpad(g::text, 7, '0') || '_000000_000010'",
            "youtube_id": f"'{prefix}' || lpad(g::text, 7, '0')",
            "start_seconds": "0",
            "end_seconds": "10",
            "duration": "10",
        },
        "generate_series(1, %s) AS g",
        [clips],
    )
    insert_select(
        CandidateCaption,
        {
            "clip_id": "(g - 1) / 3 + 1",
            "external_id": f"'{prefix}:' || g",
            "text": "'a person does something number ' || g",
            "system_id": f"{first_system.pk} + mod(g, {systems})",
            "position": "mod(g - 1, 3)",
        },
        "generate_series(1, %s) AS g",
        [candidates],
    )
    insert_select(
        CampaignClip,
        {"campaign_id": str(campaign.pk), "clip_id": "g", "candidates": "3", "open_slots": "0"},
        "generate_series(1, %s) AS g",
        [clips],
    )
    insert_select(
        CampaignCandidate,
        {
            "campaign_id": str(campaign.pk),
            "candidate_id": "g",
            "clip_id": "(g - 1) / 3 + 1",
            "quota": "3",
            "slots_taken": "3",
        },
        "generate_series(1, %s) AS g",
        [candidates],
    )
    insert_select(
        Worker,
        {"platform": "'prolific'", "external_id": f"'{prefix}-worker-' || g"},
        "generate_series(1, %s) AS g",
        [workers],
    )
    insert_select(
        Participation,
        {"campaign_id": str(campaign.pk), "worker_id": "g", "joined_at": "now()"},
        "generate_series(1, %s) AS g",
        [workers],
    )
    return campaign, candidates
