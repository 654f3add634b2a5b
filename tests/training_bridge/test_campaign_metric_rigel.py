"""The metric in the loop with a real Rigel run: a run of the tiny random backbone trained inline
from the release's configs (as test_evaluate_rigel_tiny.py trains its runs) scores a VATEX-EVAL
campaign through the campaign's scoring job. The expected rating of its five-way distribution is
the score Rigel reports (`score_records`, in [0, 1]) mapped onto 1..5, and the uncertainty is the
distribution's spread."""

from __future__ import annotations

import io
import json

import pytest
from django.core.management import call_command

from annotation.crowd.services.campaigns import campaign_update
from annotation.models import CampaignCandidate
from common.models import JobStatus
from datasets_app.models import ReferenceCaption
from tests.training_bridge.rigel_benchmark_support import benchmark_campaign
from training_bridge.models import TrainingRun
from training_bridge.services.campaign_metric import campaign_metric_score
from training_bridge.services.scoring import score_records

# Training the tiny model and two scoring passes: a few minutes on a loaded 2-core machine.
pytestmark = [pytest.mark.django_db, pytest.mark.timeout(1500)]

SETTINGS = [
    "--set", "frames=4",
    "--set", "teacher_batch_size=4",
    "--set", "teacher_shard_size=8",
    "--set", "phase1_epochs=1",
    "--set", "phase2_batch_size=4",
    "--set", "phase2_micro_batch_size=4",
    "--set", "eval_batch_size=8",
    "--set", 'standard_metrics=["bleu4"]',
]  # fmt: skip


def test_a_trained_run_scores_the_campaign_with_its_distribution(published_release):
    out = io.StringIO()
    call_command(
        "train", "--release", str(published_release.pk), "--backbone", "tiny", "--inline",
        "--json", *SETTINGS, stdout=out, stderr=io.StringIO(),
    )  # fmt: skip
    run = TrainingRun.objects.get(pk=json.loads(out.getvalue())["run"])
    assert run.status == JobStatus.SUCCEEDED, run.error
    campaign = benchmark_campaign(12)
    # The campaign's clips are VATEX-EVAL's, none of the release's: no leakage.
    campaign_update(campaign=campaign, metric=f"rigel-run:{run.pk}")

    result = campaign_metric_score(campaign_id=campaign.pk)
    rows = list(
        CampaignCandidate.objects.filter(campaign=campaign)
        .select_related("candidate", "clip")
        .order_by("id")
    )
    assert result.refused == "" and result.failed == {}
    assert sorted(result.scored) == [row.pk for row in rows]
    references = {
        row.clip_id: list(
            ReferenceCaption.objects.filter(clip_id=row.clip_id)
            .order_by("position")
            .values_list("text", flat=True)
        )
        for row in rows
    }
    reported = score_records(
        run=run,
        items=[
            {
                "clip": row.clip.vatex_id,
                "frames_key": row.clip.frames_key,
                "video_key": row.clip.video_key,
                "duration": row.clip.duration,
                "references": references[row.clip_id],
                "candidate": row.candidate.text,
            }
            for row in rows
        ],
    )
    for row, normalised in zip(rows, reported, strict=True):
        assert row.metric_score == pytest.approx(1.0 + 4.0 * normalised, abs=1e-4)
        assert row.metric_uncertainty is not None and 0.0 < row.metric_uncertainty <= 2.0
    # Run again: nothing left to score, nothing rewritten.
    assert campaign_metric_score(campaign_id=campaign.pk).scored == []
