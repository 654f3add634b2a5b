"""`evaluate_rigel` on a campaign of still images (imported with `import_images`): every record the
scorer receives is an image (T = 1, the image path), with the image's one training frame, and the
benchmark's correlations come from the imported judgments."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from annotation.models import Campaign
from tests.datasets_app.helpers import run_command
from tests.training_bridge.rigel_benchmark_support import StandInScorer, finished_run
from training_bridge.services.rigel_benchmark import campaign_data, rigel_benchmark_evaluate

pytestmark = pytest.mark.django_db
EXAMPLES = Path(__file__).resolve().parents[2] / "docs" / "examples" / "images"


class RecordingScorer(StandInScorer):
    def __init__(self) -> None:
        super().__init__()
        self.records: list = []  # type: ignore[type-arg]

    def score(self, records, **kwargs):  # type: ignore[no-untyped-def]
        self.records.extend(records)
        return super().score(records, **kwargs)


def test_an_image_campaign_is_scored_as_images(published_release, tmp_path):
    images = tmp_path / "images"
    shutil.copytree(EXAMPLES, images)
    payload = run_command(
        "import_images", str(images / "images.jsonl"), "--images", str(images),
        "--campaign", "stills", "--in-process",
    )  # fmt: skip
    assert payload["processing"]["ready"] == payload["images_queued"] >= 2
    campaign = Campaign.objects.get(slug="stills")
    data = campaign_data(campaign=campaign, correlation="default", need_benchmark=True)
    assert {clip.modality for clip in data.clip_media.values()} == {"image"}
    assert all(clip.frames_key and clip.image_key for clip in data.clip_media.values())
    run = finished_run(published_release)
    scorer = RecordingScorer()
    result = rigel_benchmark_evaluate(
        runs=[run],
        campaign=campaign,
        protocols=["all-refs"],
        correlation="default",
        metrics=["bleu1"],
        scorer_factory=lambda _run: scorer,
    )
    assert len(scorer.records) == result["candidates"] == len(data.benchmark.candidates)
    assert {record.modality for record in scorer.records} == {"image"}
    assert all(record.image_key.endswith("/image.jpg") for record in scorer.records)
    assert result["protocols"]["all-refs"]["rows"][f"run:{run.pk}"]["kendall_b"] is not None
