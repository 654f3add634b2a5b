"""`seed_demo`: the scene corpus with its drawn videos transcoded by a real Celery worker and the
crowd campaign over it, the VATEX-EVAL slice, and the curator, reported as one JSON object; a second
run changes nothing."""

from __future__ import annotations

import io
import json

import pytest
from django.contrib.auth import authenticate
from django.core.management import call_command

from annotation.models import Campaign
from common.permissions import is_curator
from datasets_app.models import Clip, ClipModality, ClipStatus


def _seed() -> dict:
    out = io.StringIO()
    call_command(
        "seed_demo",
        "--clips",
        "2",
        "--scenes",
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
    # The whole shipped scene corpus is imported; the crowd campaign rates the first two scenes.
    assert first["scenes"]["created"]["clips"] == 24
    assert first["scenes"]["created"]["candidates"] == 24 * 7
    assert (first["videos"]["written"], first["videos"]["existing"]) == (2, 0)
    attach = first["attach"]
    assert (attach["status"], attach["ready"], attach["failed"]) == ("succeeded", 2, 0)
    assert attach["matched_clips"] == 2 and len(attach["job_ids"]) == 1
    assert "datasets_app.attach_videos" in celery_worker_process.log()
    assert first["campaign_created"] == {"slug": "demo", "candidates": 14, "clips": 2}
    ready = Clip.objects.filter(status=ClipStatus.READY, modality=ClipModality.VIDEO)
    assert sorted(ready.values_list("vatex_id", flat=True)) == ["demo-scene-001", "demo-scene-002"]
    campaign = Campaign.objects.get(slug="demo")
    assert set(campaign.items.values_list("clip__vatex_id", flat=True)) == {
        "demo-scene-001",
        "demo-scene-002",
    }
    assert (campaign.name, campaign.completion_code) == ("Demo campaign", "LEPUS-DEMO")
    # The drawn still images: imported, processed by the same worker, in a campaign of their own.
    stills = first["stills"]
    assert stills["import"]["created"]["clips"] == 4
    assert stills["import"]["created"]["candidates"] == 16
    assert (stills["status"], stills["ready"], stills["failed"]) == ("succeeded", 4, 0)
    assert stills["campaign"] == {"slug": "demo-stills", "candidates": 16, "images": 4}
    images = Clip.objects.filter(modality=ClipModality.IMAGE, status=ClipStatus.READY)
    assert sorted(images.values_list("frame_count", flat=True)) == [1, 1, 1, 1]
    curator = authenticate(username="curator", password=first["curator_password"])
    assert curator is not None and is_curator(curator)

    second = _seed()
    assert second["import"]["already_imported"] is True
    assert second["scenes"]["already_imported"] is True
    # Every scene has its video now: none to draw, none to attach.
    assert (second["videos"]["written"], second["videos"]["existing"]) == (0, 2)
    assert second["attach"]["job_ids"] == [] and second["attach"]["skipped_ready"] == 2
    assert second["campaign_created"] == {"slug": "demo", "existing": True}
    assert second["curator_password"] == first["curator_password"]
    assert second["stills"]["import"]["already_imported"] is True
    assert second["stills"]["job_ids"] == []
    assert second["stills"]["campaign"] == {"slug": "demo-stills", "existing": True}
    assert Campaign.objects.count() == 3  # vatex-eval, demo and demo-stills
