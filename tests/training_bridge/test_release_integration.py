"""A release built by the export app (in-process, the code its Celery task runs) trains as is: the
training side reads exactly the files export writes."""

from __future__ import annotations

import json
from io import StringIO

import numpy as np
import pytest
from django.core.management import call_command

from datasets_app.models import Clip
from tests.export.builders import build_campaign
from tests.export.helpers import build, jsonl_records
from tests.rigel.release_support import jpeg
from training_bridge.models import TrainingRun
from training_bridge.store import DjangoStore

pytestmark = pytest.mark.django_db


def test_a_release_built_by_export_trains_and_evaluates():
    data = build_campaign(slug="integration", clips=5, candidates_per_clip=(2, 3), seed=11)
    store = DjangoStore()
    rng = np.random.default_rng(0)
    for clip in Clip.objects.filter(pk__in=[c.pk for c in data.clips]):
        clip.frames_key = f"clips/{clip.vatex_id}/frames"
        for index in range(4):
            store.put_bytes(f"{clip.frames_key}/{index:03d}.jpg", jpeg(rng))
        clip.frame_count, clip.duration = 4, 10.0
        clip.save(update_fields=["frames_key", "frame_count", "duration"])
    release = build(campaigns=[data.campaign], seed=3, ratios=[0.6, 0.4])
    train_rows = jsonl_records(release, "train")
    validation_rows = jsonl_records(release, "validation")
    assert train_rows and len(validation_rows) >= 2

    out = StringIO()
    call_command(
        "train", "--release", str(release.pk), "--backbone", "tiny", "--inline", "--json",
        "--ablation", "phase1_only", "--set", "frames=4", "--set", "phase1_epochs=2",
        "--set", 'standard_metrics=["bleu4", "cider"]',
        stdout=out, stderr=StringIO(),
    )  # fmt: skip
    result = json.loads(out.getvalue())
    assert result["status"] == "succeeded"
    run = TrainingRun.objects.get(pk=result["run"])
    assert run.step_results["teacher"]["samples"] == {
        "train": len(train_rows),
        "validation": len(validation_rows),
    }
    assert run.evaluation["splits"]["validation"]["n"] == len(validation_rows)
    assert set(run.evaluation["splits"]["validation"]["rows"]) == {"rigel", "bleu4", "cider"}
    # A release without a test split gives no results: the run says so instead of passing the
    # validation figures (the split Phase 1 chose its epoch on) off as results.
    assert run.metrics == {}
    assert run.evaluation["result_split"] is None
    assert run.has_no_test_split
    assert "has no test split" in run.evaluation["notes"][0]
    assert run.evaluation["splits"]["validation"]["role"] == "model selection"
    assert "used for model selection" in run.evaluation["splits"]["validation"]["notes"][0]


def test_a_release_with_the_default_ratios_has_a_clip_grouped_test_split():
    from export.services import release_build, release_create
    from export.splitting import DEFAULT_RATIOS

    data = build_campaign(slug="defaults", clips=40, candidates_per_clip=(2, 4), seed=5)
    release = release_create(campaigns=[data.campaign], seed=2)  # no ratios given
    release_build(release_id=release.pk)
    release.refresh_from_db()
    assert list(DEFAULT_RATIOS) == release.ratios == [0.8, 0.1, 0.1]
    assert release.split_names == ["train", "validation", "test"]
    clips_of = {
        split: {row["clip_id"] for row in jsonl_records(release, split)}
        for split in release.split_names
    }
    assert all(clips_of.values())  # every split, test included, has clips
    assert not (clips_of["train"] & clips_of["validation"])
    assert not (clips_of["train"] & clips_of["test"])
    assert not (clips_of["validation"] & clips_of["test"])
