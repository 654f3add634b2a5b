"""Still images on the curator's pages: the Data page counts video clips and images, the data
browser's clips table shows and filters the kind, a clip page and a review item show the image
from its signed URL. (The pages at 1280 and 390 px are the demo walk's; the worker page's are
tests/annotation/imports/test_images_end_to_end_browser.py.)"""

from __future__ import annotations

import re

import pytest

from annotation.selectors import platform_stats
from datasets_app.models import Clip, ClipModality, ClipStatus
from tests.factories import ClipFactory

pytestmark = pytest.mark.django_db


def _image(image_id: str, *, ready: bool = True) -> Clip:
    return Clip.objects.create(
        vatex_id=image_id,
        modality=ClipModality.IMAGE,
        youtube_id="",
        start_seconds=0,
        end_seconds=0,
        status=ClipStatus.READY if ready else ClipStatus.PENDING,
        image_key=f"clips/{image_id}/image.jpg" if ready else "",
        frames_key=f"clips/{image_id}/frames" if ready else "",
        frame_count=1 if ready else 0,
        width=64,
        height=48,
    )


def test_the_data_page_and_the_stats_count_videos_and_images(curator_client):
    ClipFactory(vatex_id="video1_000000_000004")
    _image("still_a")
    _image("still_b", ready=False)

    html = curator_client.get("/dashboard/datasets/").content.decode()
    assert '<td data-stat="clips">3</td>' in html
    assert '<td data-stat="clips_video">1</td>' in html
    assert '<td data-stat="clips_image">2</td>' in html
    stats = platform_stats()
    assert stats["clips_by_modality"] == {"video": 1, "image": 2}
    assert stats["clips_servable"] == 1  # the ready image; the factory's video has no file


def test_the_clips_table_shows_and_filters_the_kind_and_a_clip_page_shows_the_image(
    curator_client,
):
    ClipFactory(vatex_id="video1_000000_000004")
    image = _image("still_a")

    html = curator_client.get("/dashboard/datasets/clips/").content.decode()
    assert re.findall(r'<td data-field="modality">([^<]+)</td>', html) == [
        "Still image",
        "Video clip",
    ]
    only_images = curator_client.get("/dashboard/datasets/clips/?modality=image").content.decode()
    assert "still_a" in only_images and "video1_000000_000004" not in only_images
    refused = curator_client.get("/dashboard/datasets/clips/?modality=audio")
    assert refused.status_code == 400

    page = curator_client.get(f"/dashboard/datasets/clips/{image.pk}/").content.decode()
    assert '<span class="badge" data-field="modality">Still image</span>' in page
    assert re.search(
        r'<img class="clip-video" src="/media/s/clips/still_a/image\.jpg\?e=\d+&amp;s=', page
    )
    assert "<video" not in page and "YouTube" not in page


def test_the_database_refuses_an_image_with_a_window_or_a_ready_image_without_a_file():
    from django.db import IntegrityError, transaction

    with pytest.raises(IntegrityError, match="clip_window_matches_modality"), transaction.atomic():
        Clip.objects.create(
            vatex_id="bad_window", modality=ClipModality.IMAGE, start_seconds=0, end_seconds=3
        )
    with pytest.raises(IntegrityError, match="clip_ready_has_media"), transaction.atomic():
        Clip.objects.create(
            vatex_id="bad_ready",
            modality=ClipModality.IMAGE,
            start_seconds=0,
            end_seconds=0,
            status=ClipStatus.READY,
        )
    with pytest.raises(IntegrityError, match="clip_window_matches_modality"), transaction.atomic():
        Clip.objects.create(
            vatex_id="bad_video",
            modality=ClipModality.IMAGE,
            start_seconds=0,
            end_seconds=0,
            video_key="clips/x.mp4",
        )
    assert not Clip.objects.exists()


def test_rows_inserted_by_sql_that_predates_images_are_videos():
    """`modality` and `image_key` have database defaults, so SQL written before still images
    existed (the bench scripts' COPY into the clip table) still inserts valid video clips."""
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute(
            f"INSERT INTO {Clip._meta.db_table} (vatex_id, youtube_id, start_seconds, end_seconds,"
            " source_key, video_key, poster_key, frames_key, frame_count, status, error_reason,"
            " created_at) VALUES ('old_000001_000003', 'old', 1, 3, '', '', '', '', 0, 'pending',"
            " '', now())"
        )
    clip = Clip.objects.get(vatex_id="old_000001_000003")
    assert (clip.modality, clip.image_key) == (ClipModality.VIDEO, "")
