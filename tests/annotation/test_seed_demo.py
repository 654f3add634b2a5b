"""`seed_demo`: the VATEX-EVAL slice, synthetic videos transcoded by a real Celery worker, the demo
campaign and the curator, reported as one JSON object; a second run changes nothing."""

from __future__ import annotations

import io
import json

import pytest
from django.contrib.auth import authenticate
from django.core.management import call_command

from annotation.models import Campaign
from common.permissions import is_curator
from datasets_app.models import Clip, ClipStatus


def _seed() -> dict:
    out = io.StringIO()
    call_command(
        "seed_demo",
        "--clips",
        "2",
        "--video-timeout",
        "300",
        "--json",
        stdout=out,
        stderr=io.StringIO(),
    )
    return json.loads(out.getvalue())


@pytest.mark.slow
@pytest.mark.celery_worker
def test_the_demo_is_seeded_once_and_a_second_run_changes_nothing(
    celery_worker_process, settings, tmp_path
):
    settings.VAR_DIR = tmp_path
    first = _seed()

    assert first["campaign"] == "demo"
    assert first["import"]["ok"] and first["import"]["created"]["clips"] == 2
    assert first["import"]["created"]["judgments"] == 2 * 6 * 3
    assert (first["videos"]["written"], first["videos"]["existing"]) == (2, 0)
    attach = first["attach"]
    assert (attach["status"], attach["ready"], attach["failed"]) == ("succeeded", 2, 0)
    assert attach["matched_clips"] == 2 and len(attach["job_ids"]) == 1
    assert "datasets_app.attach_videos" in celery_worker_process.log()
    assert first["campaign_created"] == {"slug": "demo", "candidates": 12, "clips": 2}
    assert Clip.objects.filter(status=ClipStatus.READY).count() == 2
    campaign = Campaign.objects.get(slug="demo")
    assert (campaign.name, campaign.completion_code) == ("Demo campaign", "LEPUS-DEMO")
    curator = authenticate(username="curator", password=first["curator_password"])
    assert curator is not None and is_curator(curator)

    second = _seed()
    assert second["import"]["already_imported"] is True
    # Every clip has its video now: none to synthesise, none to attach.
    assert (second["videos"]["written"], second["videos"]["existing"]) == (0, 0)
    assert second["attach"]["job_ids"] == [] and second["attach"]["skipped_ready"] == 2
    assert second["campaign_created"] == {"slug": "demo", "existing": True}
    assert second["curator_password"] == first["curator_password"]
    assert Campaign.objects.count() == 2  # vatex-eval and demo
