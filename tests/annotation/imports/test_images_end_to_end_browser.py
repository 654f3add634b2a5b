"""Still images end to end (issue 26, point 3): an image JSONL and its drawn images imported and
processed, a campaign over them rated by two workers in Debian's Chromium (1280 px and 390 px),
quality control, and a release whose records and card say what they hold. Then a mixed campaign
(video clips and images) through the worker API, QC and a release that counts both."""

from __future__ import annotations

import json
import os
import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest
from PIL import Image, ImageDraw

from annotation.crowd.services.assignment import assignment_claim_next
from annotation.crowd.services.campaigns import campaign_create
from annotation.crowd.services.offers import assignment_offer_payload
from annotation.crowd.services.submission import assignment_submit
from annotation.models import Assignment, CampaignCandidate, Judgment
from annotation.quality.run import qc_run_inline
from common.models import JobStatus
from datasets_app.models import Clip, ClipModality
from tests.annotation.crowd_factories import all_candidate_ratings, crowd_join, ready_clip
from tests.datasets_app.helpers import run_command
from tests.export.helpers import build, jsonl_records, read_file
from tests.factories import CandidateFactory
from tests.support.browser import assert_fits_viewport, chromium_browser, page_at

pytestmark = [pytest.mark.django_db(transaction=True)]

SHAPES = (("red", "square"), ("blue", "circle"), ("green", "square"))


def draw_images(folder: Path) -> Path:
    """Three drawn images and their JSONL (references and two candidates each, no judgments)."""
    folder.mkdir()
    lines = []
    for index, (colour, shape) in enumerate(SHAPES):
        image = Image.new("RGB", (320, 240), "white")
        pen = ImageDraw.Draw(image)
        box = (110, 70, 210, 170)
        (pen.rectangle if shape == "square" else pen.ellipse)(box, fill=colour)
        image.save(folder / f"shape{index}.png")
        lines.append(
            {
                "image_id": f"still_{index}",
                "image": f"shape{index}.png",
                "references": [f"a {colour} {shape} on a white background"],
                "candidates": [
                    {"caption": f"a {colour} {shape}", "system": "drawn-truth"},
                    {"caption": "a dog on a beach", "system": "unrelated"},
                ],
            }
        )
    path = folder.parent / "stills.jsonl"
    path.write_text("\n".join(json.dumps(line) for line in lines) + "\n")
    return path


SPLITS = ("train", "validation")


def all_records(release) -> list[dict]:
    return [record for split in SPLITS for record in jsonl_records(release, split)]


def shoot(page, tmp_path: Path, name: str) -> None:
    target = tmp_path / f"{name}.png"
    page.screenshot(path=str(target), full_page=False)
    wanted = os.environ.get("LEPUS_SCREENSHOTS")
    if wanted:
        Path(wanted).mkdir(parents=True, exist_ok=True)
        shutil.copy(target, Path(wanted) / target.name)


@pytest.fixture(scope="module")
def chromium() -> Iterator[object]:
    with chromium_browser() as launched:
        yield launched


def rate_images(page, tmp_path: Path, *, width: str, value: str, shots: bool) -> list[str]:
    """Start, then rate every image shown with `value` until the thank-you page; the image
    sources shown, in order."""
    page.get_by_role("button", name="I agree — start").click()
    shown = []
    while True:
        page.wait_for_function(
            "() => document.getElementById('still').complete && !document.getElementById('task').hidden"
            " && document.querySelectorAll('#candidates fieldset').length > 0"
            " || !document.getElementById('done').hidden",
            timeout=15_000,
        )
        if page.locator("#done").is_visible():
            return shown
        # The image is shown (and decoded through its signed URL), no video, no play button,
        # and the ratings are open at once although the campaign asks 60 s on a clip.
        assert page.locator("#still").is_visible()
        assert page.evaluate("document.getElementById('still').naturalWidth") > 0
        assert not page.locator("#clip").is_visible()
        assert not page.locator("#play").is_visible()
        assert page.locator("#candidates fieldset[disabled]").count() == 0
        assert page.get_by_text("Look at the image, then rate every caption").is_visible()
        source = page.evaluate("document.getElementById('still').getAttribute('src')")
        shown.append(source)
        assert_fits_viewport(page)
        if shots and len(shown) == 1:
            shoot(page, tmp_path, f"image-task-{width}")
        for radio in page.locator(f"#candidates input[type=radio][value='{value}']").all():
            radio.check()
        progress = page.locator("#progress-label").text_content()
        assert progress.startswith(f"Image {len(shown)} of about")
        page.get_by_role("button", name="Submit", exact=True).click()
        page.wait_for_function(
            f"() => !document.getElementById('done').hidden || "
            f"!document.getElementById('progress-label').textContent.startsWith('Image {len(shown)} ')",
            timeout=15_000,
        )


@pytest.mark.browser
def test_an_image_campaign_from_import_through_chromium_qc_and_release(
    live_server, chromium, tmp_path, settings
):
    settings.LEPUS_RELEASE_PSEUDONYM_SECRET = "image-test-secret"
    path = draw_images(tmp_path / "images")
    imported = run_command(
        "import_images", str(path), "--images", str(tmp_path / "images"), "--in-process"
    )
    assert imported["created"]["clips"] == 3 and imported["processing"]["ready"] == 3
    ids = [f"still_{index}" for index in range(3)]
    campaign = campaign_create(
        slug="stills",
        name="Still image captions",
        judgments_per_candidate=2,
        clip_vatex_ids=ids,
        min_seconds_on_clip=60,
        completion_code="IMG-OK-1",
    )

    results = {}
    for width, worker, value in (
        ("wide", "5f0000000000000000000a01", "4"),
        ("phone", "5f0000000000000000000a02", "2"),
    ):
        page = page_at(chromium, width)
        page.goto(f"{live_server.url}/w/stills/?PROLIFIC_PID={worker}")
        consent = page.locator("#consent [data-modalities]")
        assert consent.get_attribute("data-modalities") == "image"
        assert "You will look at still images" in consent.text_content()
        assert "open as soon as the image is shown" in consent.text_content()
        shoot(page, tmp_path, f"image-consent-{width}")
        results[width] = rate_images(page, tmp_path, width=width, value=value, shots=True)
        assert page.locator("#completion-code").text_content() == "IMG-OK-1"
        assert page.get_by_text("You have rated 3 clips").is_visible()
        shoot(page, tmp_path, f"image-done-{width}")
        page.context.close()
    clips = {clip.vatex_id: clip for clip in Clip.objects.filter(vatex_id__in=ids)}
    for shown in results.values():
        assert sorted(source.split("?")[0].rsplit("/", 2)[-2] for source in shown) == ids
        assert all(source.split("?")[0].endswith("/image.jpg") for source in shown)

    assert Judgment.objects.filter(campaign=campaign).count() == 12
    submitted = Assignment.objects.filter(campaign=campaign)
    assert submitted.count() == 6
    # No video was played and the 60 s minimum did not apply: all six were accepted at once.
    assert all(a.client_video_played_ms is None and a.server_ms < 60_000 for a in submitted)

    run = qc_run_inline(campaign=campaign)
    assert run.status == JobStatus.SUCCEEDED
    items = CampaignCandidate.objects.filter(campaign=campaign)
    assert sorted(item.overall for item in items) == [3.0] * 6  # one worker 4, the other 2

    release = build(campaigns=[campaign])
    records = all_records(release)
    assert len(records) == 6
    for record in records:
        clip = clips[record["clip_id"]]
        assert record["modality"] == "image"
        assert (record["start"], record["end"], record["duration"]) == (None, None, None)
        assert record["image_key"] == clip.image_key == f"clips/{clip.vatex_id}/image.jpg"
        assert record["frames_key"] == f"clips/{clip.vatex_id}/frames"
        assert record["video_key"] == ""
    card = read_file(release, "README.md").decode()
    assert "| Still images | 3 |" in card
    assert "| Video clips | 0 |" in card


def test_a_mixed_campaign_is_served_rated_checked_and_released(tmp_path, settings):
    """Video clips and still images in one campaign: the worker API serves each as what it is,
    the 30 s minimum holds for a video and not for an image, QC runs over both, and the release
    says the modality of every record and counts both on the card."""
    from annotation.crowd.services.submission import SubmissionTooEarly

    path = draw_images(tmp_path / "images")
    run_command("import_images", str(path), "--images", str(tmp_path / "images"), "--in-process")
    videos = []
    for index in range(2):
        clip = ready_clip()
        CandidateFactory(clip=clip, position=0, text=f"video {index}: a man sings")
        CandidateFactory(clip=clip, position=1, text=f"video {index}: a dog barks")
        videos.append(clip)
    images = [f"still_{index}" for index in range(3)]
    campaign = campaign_create(
        slug="mixed",
        name="Mixed",
        judgments_per_candidate=2,
        clip_vatex_ids=[clip.vatex_id for clip in videos] + images,
        min_seconds_on_clip=30,
    )
    from datetime import timedelta

    from django.utils import timezone

    seen = {"video": 0, "image": 0}
    given: dict[int, list[float]] = {}
    for number in (1, 2):
        _, participation = crowd_join(campaign, f"5f00000000000000000000b{number}")
        while True:
            offer = assignment_claim_next(participation=participation)
            if offer is None:
                break
            payload = assignment_offer_payload(offer=offer, campaign=campaign)
            clip = payload["clip"]
            seen[clip["modality"]] += 1
            # Varied ratings (QC's uniform rule would rightly exclude a worker who gives one value).
            ratings = []
            for index, candidate in enumerate(payload["candidates"]):
                value = (index + number + sum(seen.values())) % 5 + 1
                ratings += all_candidate_ratings({**payload, "candidates": [candidate]}, value)
                given.setdefault(candidate["id"], []).append(value)
            body = {"ratings": ratings}
            issued = Assignment.objects.get(pk=offer.assignment_id).issued_at
            if clip["modality"] == "image":
                assert clip["video_url"] is None and clip["duration"] is None
                assert "/image.jpg" in clip["image_url"]
                assignment_submit(
                    participation=participation,
                    assignment_id=offer.assignment_id,
                    body=body,
                    now=issued + timedelta(seconds=1),
                )
            else:
                assert clip["image_url"] is None and clip["video_url"]
                with pytest.raises(SubmissionTooEarly):
                    assignment_submit(
                        participation=participation,
                        assignment_id=offer.assignment_id,
                        body=body,
                        now=issued + timedelta(seconds=1),
                    )
                assignment_submit(
                    participation=participation,
                    assignment_id=offer.assignment_id,
                    body=body,
                    now=timezone.now() + timedelta(seconds=31),
                )
    assert seen == {"video": 4, "image": 6}
    assert Judgment.objects.filter(campaign=campaign).count() == 20

    run = qc_run_inline(campaign=campaign)
    assert run.status == JobStatus.SUCCEEDED
    assert {
        item.pk: item.overall for item in CampaignCandidate.objects.filter(campaign=campaign)
    } == {pk: sum(values) / 2 for pk, values in given.items()}

    release = build(campaigns=[campaign])
    records = all_records(release)
    modality = {record["clip_id"]: record["modality"] for record in records}
    assert modality == {
        **{clip.vatex_id: "video" for clip in videos},
        **dict.fromkeys(images, "image"),
    }
    for record in records:
        if record["modality"] == "video":
            clip = next(clip for clip in videos if clip.vatex_id == record["clip_id"])
            assert (record["start"], record["end"], record["image_key"]) == (
                clip.start_seconds,
                clip.end_seconds,
                "",
            )
            assert record["video_key"] == clip.video_key
        else:
            assert record["start"] is None and record["image_key"].endswith("/image.jpg")
    # Every line is the canonical form (sorted keys, no spaces), image records included.
    text = "".join(read_file(release, f"data/{split}.jsonl").decode() for split in SPLITS)
    for line in text.splitlines():
        assert (
            json.dumps(json.loads(line), sort_keys=True, separators=(",", ":"), ensure_ascii=False)
            == line
        )
    csv_text = read_file(release, "csv/train.csv").decode()
    header = csv_text.split("\n", 1)[0].split(",")
    assert '"modality"' in header and '"image_key"' in header
    card = read_file(release, "README.md").decode()
    assert "| Clips (videos and still images) | 5 |" in card
    assert "| Video clips | 2 |" in card
    assert "| Still images | 3 |" in card
    assert Clip.objects.filter(modality=ClipModality.IMAGE).count() == 3
