"""Fixtures of the training tests: a published release with files in storage and its clips in the
database. Import the fixtures you need into a test module."""

from __future__ import annotations

from django.utils import timezone

from common.models import JobStatus
from datasets_app.models import Clip, ClipStatus
from tests.rigel.release_support import write_release
from training_bridge.store import DjangoStore


def make_published_release(*, seed: int = 0, clips: dict[str, int] | None = None, **kwargs):  # type: ignore[no-untyped-def]
    """A `Release` marked succeeded whose files (JSONL + frames) are in storage, and a `Clip` row
    per clip (so the scoring API can resolve them). Default: 3 train, 2 validation and 2 test
    clips of 4 candidates."""
    from export.models import Release

    release = Release.objects.create(
        name=f"test release {seed}",
        seed=seed,
        ratios=[0.6, 0.2, 0.2] if "test" in (clips or {"test": 2}) else [0.6, 0.4],
        status=JobStatus.SUCCEEDED,
        finished_at=timezone.now(),
    )
    release.storage_prefix = f"releases/{release.pk}"
    release.save(update_fields=["storage_prefix"])
    clips = clips or {"train": 3, "validation": 2, "test": 2}
    records = write_release(DjangoStore(), release.storage_prefix, clips=clips, seed=seed, **kwargs)
    for rows in records.values():
        for row in rows:
            Clip.objects.get_or_create(
                vatex_id=row["clip_id"],
                defaults={
                    "youtube_id": row["clip_id"].rsplit("_", 2)[0],
                    "start_seconds": 10.0,
                    "end_seconds": 20.0,
                    "frames_key": row["frames_key"],
                    "frame_count": 4,
                    "duration": 10.0,
                    "video_key": row["video_key"],
                    "status": ClipStatus.READY,
                },
            )
    release.test_records = records  # type: ignore[attr-defined]
    return release
