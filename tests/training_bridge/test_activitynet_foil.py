"""ActivityNet-FOIL as published, through the product: the official files converted, the segment
clips imported and put in a campaign, and `evaluate_rigel --protocol foil` scoring paragraphs video
by video (a stand-in scorer, so the expected accuracies can be worked out by hand), with the
paper's figures beside this benchmark and beside no other."""

from __future__ import annotations

import io
import json
from pathlib import Path

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError

from annotation.models import Campaign
from datasets_app.models import Clip
from tests.rigel.test_foil import _official_files
from tests.training_bridge.rigel_benchmark_support import (
    StandInScorer,
    add_frames,
    campaign_clips,
    finished_run,
)
from training_bridge.services.rigel_benchmark import (
    RigelEvaluationError,
    result_text,
    rigel_benchmark_evaluate,
    rigel_evaluation_create,
)

pytestmark = pytest.mark.django_db


def _json_command(*args: str) -> dict:  # type: ignore[type-arg]
    out = io.StringIO()
    call_command(*args, "--json", stdout=out, stderr=io.StringIO())
    return json.loads(out.getvalue())


def _converted_campaign(tmp_path: Path) -> tuple[Campaign, Path]:
    paths = _official_files(tmp_path)
    converted = _json_command(
        "convert_activitynet_foil",
        "--right", str(paths["right"]), "--foil", str(paths["foil"]),
        "--segments", str(paths["segments"]), "--references", str(paths["references"]),
        "--train", str(paths["train"]), "--out", str(tmp_path / "anet"),
    )  # fmt: skip
    assert (converted["videos"], converted["segments"]) == (2, 3)
    assert (
        converted["next"][0] == f"python manage.py import_candidates {converted['files']['clips']}"
    )
    _json_command("import_candidates", converted["files"]["clips"])
    segment = Clip.objects.get(vatex_id="anetfoil-v_aaa-s01")
    # cut from the source video v_aaa.mp4 at the segment's window (clamped to the duration)
    assert (segment.youtube_id, segment.start_seconds, segment.end_seconds) == ("v_aaa", 12.2, 30.0)
    _json_command("create_campaign", "--slug", "anet-foil", "--system", "activitynet-foil")
    campaign = Campaign.objects.get(slug="anet-foil")
    add_frames(campaign_clips(campaign))
    return campaign, Path(converted["files"]["foil_file"])


def test_the_paragraph_protocol_on_converted_official_files(published_release, tmp_path):
    campaign, foil_file = _converted_campaign(tmp_path)
    free = finished_run(published_release, reference_free=True)
    based = finished_run(published_release)
    result = rigel_benchmark_evaluate(
        runs=[free, based],
        campaign=campaign,
        protocols=["foil"],
        metrics=["bleu1"],
        foil_lines=foil_file.read_text().splitlines(),
        scorer_factory=lambda _run: StandInScorer(),
    )
    foil = result["foil"]
    assert (foil["benchmark"], foil["videos"], foil["pairs"]) == ("activitynet-foil", 2, 3)
    assert foil["rule"].startswith("a video is right when its correct paragraph")
    based_rows = foil["settings"]["reference-based"]["rows"]
    free_rows = foil["settings"]["reference-free"]["rows"]
    # The stand-in: 0.01 a word + 0.1 a word found in a reference. v_aaa: sentence 0 "A man holds
    # a guitar." finds a/a/guitar. in "A person picks up a guitar." (3), its foil "... violin."
    # finds 2; sentence 1 equals its foil -> the paragraph mean is higher: right. v_bbb: "A dog
    # runs on the beach." finds a/dog/runs/on (in "along") against the foil's a/runs/on: right.
    assert based_rows[f"run:{based.pk}"]["accuracy"] == 100.0
    # Reference-free the stand-in sees only word counts, equal in every pair: two ties, wrong.
    assert free_rows[f"run:{free.pk}"]["accuracy"] == 0.0
    # BLEU-1 against the overlapping references: each correct paragraph matches one more word
    assert based_rows["bleu1"]["accuracy"] == 100.0
    # The paper's ActivityNet-FOIL accuracies (Table 2) stand beside this benchmark, sourced
    for setting, published in (("reference-free", 96.2), ("reference-based", 97.1)):
        block = foil["settings"][setting]
        assert block["published"]["accuracy"] == published
        assert "Table 2" in block["published"]["source"]
        assert block["videos"] == 2
    text = result_text(result)
    assert "[ActivityNet-FOIL (paragraph protocol, as published)]" in text
    assert "Rigel paper, Table 2 (published)" in text and "97.10" in text


def test_the_foil_protocol_needs_its_file_and_one_foil_benchmark_at_a_time(
    published_release, tmp_path
):
    campaign, foil_file = _converted_campaign(tmp_path)
    run = finished_run(published_release)
    with pytest.raises(RigelEvaluationError, match="noun-swap protocol"):
        rigel_benchmark_evaluate(
            runs=[run],
            campaign=campaign,
            protocols=["foil"],
            scorer_factory=lambda _run: StandInScorer(),
        )
    with pytest.raises(RigelEvaluationError, match="one foil benchmark per evaluation"):
        rigel_benchmark_evaluate(
            runs=[run],
            campaign=campaign,
            protocols=["foil", "noun-swap"],
            foil_lines=foil_file.read_text().splitlines(),
            scorer_factory=lambda _run: StandInScorer(),
        )
    with pytest.raises(CommandError, match="convert_activitynet_foil"):
        call_command(
            "evaluate_rigel", "--run", str(run.pk), "--campaign", campaign.slug,
            "--protocol", "foil", "--json", stdout=io.StringIO(), stderr=io.StringIO(),
        )  # fmt: skip
    from django.core.exceptions import ValidationError

    with pytest.raises(ValidationError, match="needs its file"):
        rigel_evaluation_create(run_ids=[run.pk], campaign=campaign, protocols=["foil"])


def test_the_api_takes_paragraphs_and_the_page_a_file(
    curator_client, published_release, tmp_path, django_capture_on_commit_callbacks
):
    from django.core.files.uploadedfile import SimpleUploadedFile

    from common.storage import read_bytes
    from training_bridge.models import RigelEvaluation

    campaign, foil_file = _converted_campaign(tmp_path)
    run = finished_run(published_release)
    paragraphs = [json.loads(line) for line in foil_file.read_text().splitlines()]
    with django_capture_on_commit_callbacks(execute=False):
        response = curator_client.post(
            "/api/v1/training/evaluations",
            {"runs": [run.pk], "campaign": campaign.slug, "protocols": ["foil"],
             "foil_paragraphs": paragraphs},
            content_type="application/json",
        )  # fmt: skip
    assert response.status_code == 201, response.content
    stored = read_bytes(RigelEvaluation.objects.get(pk=response.json()["id"]).foil_key)
    assert [json.loads(line)["video"] for line in stored.decode().splitlines()] == [
        "v_aaa",
        "v_bbb",
    ]
    with django_capture_on_commit_callbacks(execute=False):
        response = curator_client.post(
            "/dashboard/training/evaluations/start/",
            {"run": str(run.pk), "campaign": campaign.slug, "protocol": ["foil"],
             "foil_file": SimpleUploadedFile("activitynet_foil.jsonl", foil_file.read_bytes())},
        )  # fmt: skip
    assert response.status_code == 302
    evaluation = RigelEvaluation.objects.latest("pk")
    assert evaluation.protocols == ["foil"] and read_bytes(evaluation.foil_key) == (
        foil_file.read_bytes()
    )
