"""A release that mixes clips without video (an imported VATEX-EVAL slice has scores but no
videos) with clips that have one trains on the latter and says how many it left out; a release
whose train or validation split has no clip with a video is refused before a run is recorded.
Never a run that fails at 0 % with "has neither frames nor video" (issue 24, point 5)."""

from __future__ import annotations

import json
from io import StringIO

import numpy as np
import pytest
from django.core.exceptions import ValidationError
from django.core.management import call_command
from django.test import Client

from annotation.models import CampaignCandidate
from datasets_app.models import Clip, ClipStatus
from tests.export.builders import build_campaign
from tests.export.helpers import build, jsonl_records
from tests.rigel.release_support import jpeg
from training_bridge.models import TrainingRun
from training_bridge.services import training_release_video_coverage, training_run_create
from training_bridge.store import DjangoStore

pytestmark = pytest.mark.django_db


def _give_frames(clips: list[Clip]) -> None:
    store = DjangoStore()
    rng = np.random.default_rng(0)
    for clip in clips:
        clip.frames_key = f"clips/{clip.vatex_id}/frames"
        for index in range(4):
            store.put_bytes(f"{clip.frames_key}/{index:03d}.jpg", jpeg(rng))
        clip.frame_count, clip.duration = 4, 10.0
        clip.save(update_fields=["frames_key", "frame_count", "duration"])


def _without_video(clips: list[Clip]) -> None:
    """As imported from VATEX-EVAL: a YouTube id and times, no video file, no frames."""
    Clip.objects.filter(pk__in=[clip.pk for clip in clips]).update(
        video_key="", frames_key="", status=ClipStatus.PENDING
    )


def _mixed_release():  # type: ignore[no-untyped-def]
    """Two campaigns in one release: one whose clips have frames, one (like the imported
    VATEX-EVAL slice) whose clips have none."""
    with_video = build_campaign(slug="scenes", clips=8, candidates_per_clip=(2, 3), seed=11)
    without_video = build_campaign(
        slug="imported", clips=8, candidates_per_clip=(2, 3), seed=12, clip_prefix="yt"
    )
    _give_frames(list(Clip.objects.filter(pk__in=[clip.pk for clip in with_video.clips])))
    _without_video(without_video.clips)
    return build(campaigns=[with_video.campaign, without_video.campaign], seed=3, ratios=[0.6, 0.4])


def _rows(release, split: str, *, video: bool) -> list[dict]:  # type: ignore[no-untyped-def]
    return [
        row
        for row in jsonl_records(release, split)
        if bool(row["frames_key"] or row["video_key"]) is video
    ]


def test_a_release_mixing_clips_without_video_trains_on_those_with_video():
    release = _mixed_release()
    kept = {split: _rows(release, split, video=True) for split in ("train", "validation")}
    left = {split: _rows(release, split, video=False) for split in ("train", "validation")}
    # The release really mixes them (else the test proves nothing): clips with video in both
    # splits, clips without in train.
    assert all(kept.values()) and left["train"], (kept, left)
    left = {split: rows for split, rows in left.items() if rows}

    out = StringIO()
    call_command(
        "train", "--release", str(release.pk), "--backbone", "tiny", "--inline", "--json",
        "--ablation", "phase1_only", "--set", "frames=4", "--set", "phase1_epochs=2",
        "--set", 'standard_metrics=["bleu4"]',
        stdout=out, stderr=StringIO(),
    )  # fmt: skip

    result = json.loads(out.getvalue())
    run = TrainingRun.objects.get(pk=result["run"])
    assert (result["status"], run.error) == ("succeeded", "")
    assert run.step_results["teacher"]["samples"] == {
        split: len(rows) for split, rows in kept.items()
    }
    assert run.step_results["teacher"]["left_out"] == {
        split: {"candidates": len(rows), "clips": len({row["clip_id"] for row in rows})}
        for split, rows in left.items()
    }
    assert run.evaluation["splits"]["validation"]["n"] == len(kept["validation"])
    sentence = (
        "Left out "
        + ", ".join(
            f"{len(rows)} of {len(rows) + len(kept[split])} candidates "
            f"({len({row['clip_id'] for row in rows})} clips) of {split}"
            for split, rows in left.items()
        )
        + ": their clips have no video."
    )
    assert sentence in run.evaluation["notes"]


def test_starting_a_run_on_a_mixed_release_from_the_page_says_how_many_are_left_out(curator):
    release = _mixed_release()
    left_out = sum(len(_rows(release, split, video=False)) for split in ("train", "validation"))
    kept = sum(len(_rows(release, split, video=True)) for split in ("train", "validation"))
    client = Client()
    client.force_login(curator)

    response = client.post(
        "/dashboard/training/start/",
        {"release": release.pk, "backbone": "tiny", "device": "cpu", "ablation": "full"},
        follow=True,
    )

    run = TrainingRun.objects.get()
    assert response.redirect_chain == [(f"/dashboard/training/{run.pk}/", 302)]
    assert [str(message) for message in response.context["messages"]] == [
        f"Training run {run.pk} queued. It trains on the {kept} candidates whose clips have a "
        f"video; {left_out} candidates on clips without video are left out."
    ]


def test_a_release_whose_clips_have_no_video_is_refused_before_the_run_is_recorded(curator):
    imported = build_campaign(slug="imported", clips=8, candidates_per_clip=(2, 3), seed=12)
    _without_video(imported.clips)
    release = build(campaigns=[imported.campaign], seed=3, ratios=[0.6, 0.4])
    train = len(jsonl_records(release, "train"))
    expected = (
        f"release {release.pk} has no clip with a video in its train split: its {train} train "
        "candidates are all on clips without video (e.g. the imported VATEX-EVAL slice, which "
        "has scores but no videos), and a video model cannot train on them. Build a release "
        "that includes a campaign whose clips have videos."
    )

    with pytest.raises(ValidationError) as refused:
        training_run_create(release=release, backbone="tiny")
    client = Client()
    client.force_login(curator)
    page = client.post(
        "/dashboard/training/start/",
        {"release": release.pk, "backbone": "tiny", "device": "cpu", "ablation": "full"},
    )

    assert refused.value.messages == [expected]
    assert page.status_code == 400
    assert page.context["form"].non_field_errors() == [expected]
    assert not TrainingRun.objects.exists()


def test_the_coverage_counts_each_split_from_the_release_records():
    release = _mixed_release()

    coverage = training_release_video_coverage(release=release)

    assert coverage.candidates == {
        split: len(jsonl_records(release, split)) for split in ("train", "validation")
    }
    assert coverage.with_video == {
        split: len(_rows(release, split, video=True)) for split in ("train", "validation")
    }
    assert coverage.refusal(release_id=release.pk) == ""


def test_a_release_with_no_candidates_in_its_train_split_is_refused(curator):
    imported = build_campaign(slug="imported", clips=4, candidates_per_clip=(2, 3), seed=12)
    # As the VATEX-EVAL slice before its QC run: judgments, but none kept yet.
    CampaignCandidate.objects.filter(campaign=imported.campaign).update(
        is_finalised=False, kept_judgments=0
    )
    release = build(campaigns=[imported.campaign], seed=3, ratios=[0.6, 0.4])

    with pytest.raises(ValidationError) as refused:
        training_run_create(release=release, backbone="tiny")

    assert release.counts["splits"]["train"]["candidates"] == 0
    assert refused.value.messages == [
        f"release {release.pk} has no candidates in its train split: every candidate of its "
        "campaigns was left out (see the release's page: below quota, under review, ...). Build "
        "a release once its campaigns have finalised candidates."
    ]
    assert not TrainingRun.objects.exists()


def test_a_step_whose_figures_hold_nan_is_recorded_with_null_in_their_place(curator):
    """The demo's tiny run ended its evaluation with CIDEr's Kendall tau NaN (every candidate
    scored the same): PostgreSQL's JSON has no NaN, and the run failed at its last step."""
    from training_bridge.services.runs import _record_step

    release = _mixed_release()
    run = training_run_create(release=release, backbone="tiny", device="cpu", start=False)
    run.status = "running"
    run.save(update_fields=["status"])
    result = {
        "metrics": {"kendall_b": float("nan"), "pearson": 0.25},
        "table": {"cider": {"kendall_b": np.float64("nan"), "spearman": float("inf")}},
    }

    class Silent:
        def log(self, message: str) -> None:
            pass

    _record_step(run=run, step="evaluate", result=result, log_key="log.txt", reporter=Silent())  # type: ignore[arg-type]

    run.refresh_from_db()
    assert run.status == "succeeded"
    assert run.metrics == {"kendall_b": None, "pearson": 0.25}
    assert run.evaluation == {"cider": {"kendall_b": None, "spearman": None}}
    assert run.step_results["evaluate"]["metrics"] == {"kendall_b": None, "pearson": 0.25}
