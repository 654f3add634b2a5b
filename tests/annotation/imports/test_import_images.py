"""The generic image JSONL importer (`import_images`) and the image processing job: images drawn
with Pillow, real storage, the refusals (file, line, field) with nothing written, idempotency,
the source scale mapped onto 1–5, and the decoding guards (not an image, too many pixels)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from django.core.management import CommandError
from PIL import Image

from annotation.imports.images import scale_map
from annotation.models import Campaign, Judgment
from common import storage
from datasets_app.models import CandidateCaption, Clip, ClipModality, ClipStatus, ReferenceCaption
from datasets_app.services.images import clip_process_image, image_decode
from datasets_app.services.imports import ImportRejected
from tests.datasets_app.helpers import run_command


def draw(
    path: Path, *, size: tuple[int, int] = (64, 48), colour: str = "teal", mode: str = "RGB"
) -> Path:
    image = Image.new(mode, size, colour)
    image.save(path)
    return path


def write_lines(path: Path, lines: list[dict[str, Any]]) -> Path:
    path.write_text("\n".join(json.dumps(line) for line in lines) + "\n", encoding="utf-8")
    return path


def sample(folder: Path) -> tuple[Path, Path]:
    images = folder / "images"
    images.mkdir()
    draw(images / "dog.jpg", colour="brown")
    draw(images / "sea.png", size=(40, 80), colour=(0, 0, 255, 128), mode="RGBA")
    lines = [
        {
            "image_id": "flickr_1",
            "image": "dog.jpg",
            "references": ["a brown dog", "a dog stands still"],
            "candidates": [
                {
                    "caption": "a dog",
                    "system": "sys-a",
                    "judgments": [
                        {"rater": "expert1", "overall": 4},
                        {"rater": "expert2", "overall": 1},
                    ],
                },
                {
                    "caption": "a cat",
                    "system": "sys-b",
                    "judgments": [{"rater": "expert1", "overall": 2}],
                },
            ],
        },
        {
            "image_id": "flickr_2",
            "image": "sea.png",
            "references": ["blue water"],
            "candidates": [
                {"caption": "the sea", "judgments": [{"rater": "expert1", "overall": 3}]}
            ],
        },
    ]
    return write_lines(folder / "images.jsonl", lines), images


def test_scale_map_keeps_every_level_distinct():
    assert [scale_map(v, low=1, high=4) for v in (1, 2, 3, 4)] == [1, 2, 4, 5]
    assert [scale_map(v, low=0, high=1) for v in (0, 1)] == [1, 5]
    assert [scale_map(v, low=1, high=5) for v in (1, 2, 3, 4, 5)] == [1, 2, 3, 4, 5]
    assert [scale_map(v, low=0, high=2) for v in (0, 1, 2)] == [1, 3, 5]


@pytest.mark.django_db
def test_import_images_creates_image_clips_judgments_and_processes_the_files(tmp_path, settings):
    settings.LEPUS_IMAGE_MAX_SIDE = 32
    path, images = sample(tmp_path)
    payload = run_command(
        "import_images",
        str(path),
        "--images",
        str(images),
        "--campaign",
        "flickr-test",
        "--scale",
        "1",
        "4",
        "--in-process",
    )
    assert payload["ok"] is True
    assert payload["created"]["clips"] == 2
    assert payload["created"]["references"] == 3
    assert payload["created"]["candidates"] == 3
    assert payload["created"]["judgments"] == 4
    assert payload["campaign"] == "flickr-test"
    assert payload["images_queued"] == 2
    assert payload["processing"]["ready"] == 2 and payload["processing"]["failed"] == 0

    dog = Clip.objects.get(vatex_id="flickr_1")
    assert (dog.modality, dog.youtube_id, dog.start_seconds, dog.end_seconds) == (
        ClipModality.IMAGE,
        "",
        0.0,
        0.0,
    )
    assert dog.status == ClipStatus.READY and dog.is_servable
    assert dog.image_key == "clips/flickr_1/image.jpg" and dog.video_key == ""
    assert (dog.frames_key, dog.frame_count, dog.width, dog.height) == (
        "clips/flickr_1/frames",
        1,
        32,
        24,
    )
    assert storage.list_keys("clips/flickr_1/frames") == ["clips/flickr_1/frames/000.jpg"]
    with storage.local_copy(dog.image_key) as display, Image.open(display) as shown:
        assert (shown.format, shown.size) == ("JPEG", (32, 24))
    sea = Clip.objects.get(vatex_id="flickr_2")
    assert (sea.width, sea.height) == (16, 32)
    with storage.local_copy("clips/flickr_2/frames/000.jpg") as frame, Image.open(frame) as shown:
        assert shown.mode == "RGB"  # the transparent PNG is flattened
    assert list(ReferenceCaption.objects.filter(clip=dog).values_list("text", flat=True)) == [
        "a brown dog",
        "a dog stands still",
    ]
    assert CandidateCaption.objects.get(external_id="image:flickr_1:0").system.name == "sys-a"
    assert CandidateCaption.objects.get(external_id="image:flickr_2:0").system.name == "unknown"
    # 1–4 mapped onto 1–5: 4 → 5, 1 → 1, 2 → 2, 3 → 4.
    values = sorted(
        (
            j.campaign_candidate.candidate.external_id,
            j.participation.worker.external_id,
            j.values["overall"],
        )
        for j in Judgment.objects.select_related(
            "campaign_candidate__candidate", "participation__worker"
        )
    )
    assert values == [
        ("image:flickr_1:0", "flickr-test:expert1", 5),
        ("image:flickr_1:0", "flickr-test:expert2", 1),
        ("image:flickr_1:1", "flickr-test:expert1", 2),
        ("image:flickr_2:0", "flickr-test:expert1", 4),
    ]
    campaign = Campaign.objects.get(slug="flickr-test")
    assert campaign.is_imported and campaign.question_keys == ["overall"]

    again = run_command(
        "import_images", str(path), "--images", str(images), "--campaign", "flickr-test"
    )
    assert again["already_imported"] is True and again["images_queued"] == 0
    assert Clip.objects.count() == 2 and Judgment.objects.count() == 4


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("change", "line", "field", "message"),
    [
        (
            lambda lines: lines[1].update(image="missing.jpg"),
            2,
            "image",
            "not a file in the images folder",
        ),
        (lambda lines: lines[1].update(image="../dog.jpg"), 2, "image", "no folder part"),
        (lambda lines: lines[1].update(image="notes.txt"), 2, "image", "not an image file name"),
        (
            lambda lines: lines[0]["candidates"][1].update(caption=""),
            1,
            "candidates[1].caption",
            "empty",
        ),
        (
            lambda lines: lines[0]["candidates"][0]["judgments"][0].update(overall=5),
            1,
            "candidates[0].judgments[0].overall",
            "not a whole number in [1, 4]",
        ),
        (lambda lines: lines[1].update(image_id="flickr_1"), 2, "image_id", "already on line 1"),
        (lambda lines: lines[1].update(scale=[1, 10]), 2, "scale", "2 to 5 levels"),
        (lambda lines: lines[1].update(colour="red"), 2, "colour", "unknown field"),
    ],
)
def test_a_bad_line_is_refused_with_its_line_and_field_and_nothing_is_written(
    tmp_path, change, line, field, message
):
    path, images = sample(tmp_path)
    lines = [json.loads(text) for text in path.read_text().splitlines()]
    change(lines)
    write_lines(path, lines)
    with pytest.raises(CommandError) as refused:
        run_command(
            "import_images",
            str(path),
            "--images",
            str(images),
            "--campaign",
            "c1",
            "--scale",
            "1",
            "4",
        )
    assert f"line {line}" in str(refused.value)
    assert f'field "{field}"' in str(refused.value)
    assert message in str(refused.value)
    assert Clip.objects.count() == 0 and CandidateCaption.objects.count() == 0
    assert Judgment.objects.count() == 0 and not Campaign.objects.exists()


@pytest.mark.django_db
def test_judgments_need_a_campaign(tmp_path):
    path, images = sample(tmp_path)
    from annotation.imports.images import images_import

    with pytest.raises(ImportRejected, match="--campaign"):
        images_import(path=path, images=images)
    assert Clip.objects.count() == 0


@pytest.mark.django_db
def test_a_video_id_is_not_reused_for_an_image(tmp_path):
    from tests.factories import ClipFactory

    ClipFactory(vatex_id="flickr_2", youtube_id="flickr", start_seconds=1, end_seconds=2)
    path, images = sample(tmp_path)
    with pytest.raises(CommandError, match="already stored as a video clip"):
        run_command("import_images", str(path), "--images", str(images), "--campaign", "c1")
    assert Clip.objects.count() == 1


@pytest.mark.django_db
def test_not_an_image_and_too_many_pixels_put_the_clip_in_error(tmp_path, settings):
    path, images = sample(tmp_path)
    (images / "dog.jpg").write_bytes(b"this is not a JPEG at all")
    draw(images / "sea.png", size=(300, 300))
    settings.LEPUS_IMAGE_MAX_PIXELS = 200 * 200
    payload = run_command(
        "import_images", str(path), "--images", str(images), "--campaign", "c1", "--in-process"
    )
    assert payload["processing"]["ready"] == 0 and payload["processing"]["failed"] == 2
    dog = Clip.objects.get(vatex_id="flickr_1")
    sea = Clip.objects.get(vatex_id="flickr_2")
    assert dog.status == ClipStatus.ERROR and "not an image" in dog.error_reason
    assert sea.status == ClipStatus.ERROR and "(90000 pixels)" in sea.error_reason
    assert "the limit is 40000 pixels (LEPUS_IMAGE_MAX_PIXELS)" in sea.error_reason
    assert not dog.is_servable and not Clip.objects.servable().exists()
    assert storage.list_keys("clips") == []


def test_a_header_announcing_a_bomb_is_refused_before_decoding(tmp_path, settings):
    """A 1x1 PNG whose header claims 30000x30000 pixels (900 megapixels): refused from the header,
    before Pillow allocates anything; Pillow's global guard is put back afterwards."""
    import struct
    import zlib

    tiny = draw(tmp_path / "tiny.png", size=(1, 1)).read_bytes()
    header = struct.pack(">II", 30000, 30000) + tiny[24:29]
    crc = struct.pack(">I", zlib.crc32(b"IHDR" + header) & 0xFFFFFFFF)
    bomb = tmp_path / "bomb.png"
    bomb.write_bytes(tiny[:16] + header + crc + tiny[33:])
    before = Image.MAX_IMAGE_PIXELS
    from datasets_app.services.images import ImageRefused

    with pytest.raises(ImageRefused, match=r"900000000 pixels.*LEPUS_IMAGE_MAX_PIXELS"):
        image_decode(bomb)
    assert before == Image.MAX_IMAGE_PIXELS


@pytest.mark.django_db
def test_a_missing_source_marks_the_image_error(tmp_path):
    clip = Clip.objects.create(
        vatex_id="lonely",
        modality=ClipModality.IMAGE,
        youtube_id="",
        start_seconds=0,
        end_seconds=0,
        source_key=str(tmp_path / "gone.jpg"),
    )
    outcome = clip_process_image(clip_id=clip.pk)
    clip.refresh_from_db()
    assert not outcome.ready and clip.status == ClipStatus.ERROR
    assert clip.error_reason == f"source image not found: {tmp_path / 'gone.jpg'}"


@pytest.mark.django_db
def test_the_shipped_example_imports_and_processes(settings):
    from tests.datasets_app.helpers import EXAMPLES

    folder = EXAMPLES / "images"
    payload = run_command(
        "import_images", str(folder / "images.jsonl"), "--images", str(folder),
        "--campaign", "example-stills", "--in-process",
    )  # fmt: skip
    created = payload["created"]
    assert (created["clips"], created["references"], created["candidates"]) == (2, 4, 4)
    assert (created["judgments"], created["campaigns"]) == (8, 1)
    assert payload["processing"]["ready"] == 2
    # 1–4 onto 1–5: 4 → 5, 3 → 4, 1 → 1.
    values = sorted(j.values["overall"] for j in Judgment.objects.all())
    assert values == [1, 1, 1, 1, 4, 4, 5, 5]


@pytest.mark.django_db
def test_the_import_page_takes_an_archive_of_the_jsonl_and_its_images(curator, tmp_path):
    import zipfile

    from annotation.imports.uploads import import_upload_from_path, import_upload_run
    from annotation.models import ImportUpload, UploadKind
    from common.models import JobStatus
    from datasets_app.models import VideoAttachJob
    from datasets_app.services.video import video_attach_job_run
    from tests.datasets_app.helpers import EXAMPLES

    archive = tmp_path / "stills.zip"
    with zipfile.ZipFile(archive, "w") as packed:
        for path in sorted((EXAMPLES / "images").iterdir()):
            packed.write(path, f"stills/{path.name}")
    job = import_upload_from_path(
        kind=UploadKind.IMAGES, path=archive, user=curator, campaign_slug="example-stills"
    )
    import_upload_run(job_id=job.pk)
    job.refresh_from_db()
    assert job.status == JobStatus.SUCCEEDED, job.error
    assert job.result["created"]["clips"] == 2 and job.result["campaign"] == "example-stills"
    image_job = VideoAttachJob.objects.get()
    assert job.result["job_ids"] == [image_job.pk] and job.result["images_queued"] == 2
    # The sources were copied into storage (the unpacked folder is gone after the upload's job).
    sources = sorted(Clip.objects.values_list("source_key", flat=True))
    assert sources == [
        "sources/images/example_blue_circle.png",
        "sources/images/example_red_square.png",
    ]
    video_attach_job_run(job_id=image_job.pk)
    assert Clip.objects.servable().count() == 2

    # An archive without its JSONL, or with a missing image, writes nothing.
    bad = tmp_path / "bad.zip"
    with zipfile.ZipFile(bad, "w") as packed:
        packed.write(EXAMPLES / "images" / "images.jsonl", "images.jsonl")
        packed.write(EXAMPLES / "images" / "red_square.png", "red_square.png")
    refused_job = import_upload_from_path(
        kind=UploadKind.IMAGES, path=bad, user=curator, campaign_slug="other-stills"
    )
    import_upload_run(job_id=refused_job.pk)
    refused_job.refresh_from_db()
    assert refused_job.status == JobStatus.FAILED
    assert refused_job.error == (
        "bad.zip: images.jsonl, line 2, field \"image\": 'blue_circle.png' is not a file in the "
        "images folder"
    )
    assert ImportUpload.objects.count() == 2 and Clip.objects.count() == 2
