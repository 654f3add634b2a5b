"""One clip's media, in a Celery worker: where its source file is, the rules for a clip that
becomes ready or fails (video or still image alike), and the processing of a video clip (probe,
cut, transcode, poster, training frames, upload). Still images: `datasets_app.services.images`;
the job that runs both: `datasets_app.services.video`.

Never with ffmpeg or an upload inside a database transaction: each clip's row is updated in short
single statements before and after the work.
"""

from __future__ import annotations

import logging
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from django.conf import settings
from django.utils import timezone

from common import media, storage
from datasets_app.models import Clip, ClipStatus

logger = logging.getLogger(__name__)

# A full source may end this much before the clip's window does (VATEX windows are whole seconds).
SOURCE_SHORTFALL_TOLERANCE = 0.5


class SourceMissing(Exception):
    """The clip's source video is not where its source key says."""


def clip_storage_prefix(vatex_id: str) -> str:
    return f"clips/{vatex_id}"


def clip_claim(clip_id: int, **lookups: object) -> tuple[Clip, str]:
    """Load the clip (matching `lookups` too), mark it processing, and say where its media go."""
    clip = Clip.objects.get(pk=clip_id, **lookups)
    Clip.objects.filter(pk=clip_id).update(status=ClipStatus.PROCESSING)
    return clip, clip_storage_prefix(clip.vatex_id)


@dataclass(frozen=True)
class ClipVideoOutcome:
    clip_id: int
    ready: bool
    error: str = ""


@contextmanager
def clip_source_file(clip: Clip) -> Iterator[Path]:
    key = clip.source_key
    noun = "image" if clip.is_image else "video"
    if not key:
        raise SourceMissing(
            f"the clip has no source {noun} (attach one with attach_videos or import_images)"
        )
    if key.startswith("/"):
        path = Path(key)
        if not path.is_file():
            raise SourceMissing(f"source {noun} not found: {key}")
        yield path
        return
    try:
        found = storage.exists(key)
    except ValueError as error:
        raise SourceMissing(f"invalid source key {key!r}: {error}") from error
    if not found:
        raise SourceMissing(f"source {noun} not found in storage: {key}")
    with storage.local_copy(key) as path:
        yield path


def clip_media_ready(clip_id: int, **media_fields: object) -> ClipVideoOutcome:
    """The clip's media are uploaded: record their keys and sizes and make the clip ready (and so
    servable) in one statement."""
    Clip.objects.filter(pk=clip_id).update(
        **media_fields,
        status=ClipStatus.READY,
        error_reason="",
        processed_at=timezone.now(),
    )
    return ClipVideoOutcome(clip_id, ready=True)


def clip_media_failed(clip: Clip, error: Exception, *, what: str) -> ClipVideoOutcome:
    """A source that cannot become media (missing, unreadable, refused): the clip (video or still
    image) goes to the error state with the reason, and none of its media keys stays set, so it is
    never servable."""
    reason = str(error)[:2000]
    Clip.objects.filter(pk=clip.pk).update(
        status=ClipStatus.ERROR,
        error_reason=reason,
        video_key="",
        poster_key="",
        image_key="",
        frames_key="",
        frame_count=0,
        processed_at=timezone.now(),
    )
    logger.warning("%s %s: %s", what, clip.vatex_id, reason)
    return ClipVideoOutcome(clip.pk, ready=False, error=reason)


def clip_requeue(clip_id: int) -> None:
    """Any other failure (storage down, the worker stopping): the clip goes back to the queue and
    a re-run processes it."""
    Clip.objects.filter(pk=clip_id, status=ClipStatus.PROCESSING).update(status=ClipStatus.QUEUED)


# --- Video clips -----------------------------------------------------------------------------------


@dataclass(frozen=True)
class _RenderedVideo:
    """A clip's files in the work folder, ready to upload."""

    video: Path
    poster: Path
    frames: list[Path]
    info: media.MediaInfo


def _is_precut(clip: Clip) -> bool:
    return Path(clip.source_key).stem == clip.vatex_id


def _clip_window(clip: Clip, source_info: media.MediaInfo) -> tuple[float | None, float | None]:
    """(start, length) to cut from the source; (None, None) for a pre-cut file taken whole."""
    if _is_precut(clip):
        return None, None
    if source_info.duration < clip.end_seconds - SOURCE_SHORTFALL_TOLERANCE:
        raise media.MediaError(
            f"the source video is {source_info.duration:.2f} s long; the clip's "
            f"window [{clip.start_seconds:g}, {clip.end_seconds:g}] s ends after it"
        )
    length = min(clip.end_seconds, source_info.duration) - clip.start_seconds
    return clip.start_seconds, length


def _video_render(
    clip: Clip, source: Path, work: Path, *, heartbeat: media.Heartbeat | None
) -> _RenderedVideo:
    """Cut and transcode the clip to a browser-safe MP4, then take its poster and training frames."""
    try:
        source_info = media.probe(source)
    except media.MediaError as error:
        raise media.MediaError(f"the source video cannot be read: {error}") from error
    if not source_info.has_video:
        raise media.MediaError("the source file has no video stream")
    start, length = _clip_window(clip, source_info)
    output = work / "video.mp4"
    media.transcode(
        source,
        output,
        source_info=source_info,
        max_height=settings.LEPUS_VIDEO_MAX_HEIGHT,
        start=start,
        duration=length,
        heartbeat=heartbeat,
    )
    info = media.probe(output)
    if not media.is_browser_safe(info):
        raise media.MediaError(
            f"the transcoded video is not browser-safe ({info.video_codec}/"
            f"{info.audio_codec}, {info.width}x{info.height})"
        )
    media.extract_poster(
        output, work / "poster.jpg", at_seconds=info.duration / 2, heartbeat=heartbeat
    )
    frames = media.extract_frames(
        output,
        work / "frames",
        count=settings.LEPUS_VIDEO_FRAMES,
        duration=info.duration,
        heartbeat=heartbeat,
    )
    return _RenderedVideo(video=output, poster=work / "poster.jpg", frames=frames, info=info)


def _video_upload(prefix: str, rendered: _RenderedVideo) -> tuple[str, str]:
    """Upload the rendered files under `prefix`; (video key, poster key). No transaction is open
    here; the clip is not servable until it is marked ready, so a half-finished upload is never
    shown."""
    storage.delete_prefix(f"{prefix}/frames")
    video_key = storage.put_file(f"{prefix}/video.mp4", rendered.video)
    poster_key = storage.put_file(f"{prefix}/poster.jpg", rendered.poster)
    for path in rendered.frames:
        storage.put_file(f"{prefix}/frames/{path.name}", path)
    return video_key, poster_key


def clip_process_video(
    *, clip_id: int, heartbeat: media.Heartbeat | None = None
) -> ClipVideoOutcome:
    """Probe the clip's source, cut its window (or take a pre-cut file whole), transcode it to a
    browser-safe MP4, make a poster and LEPUS_VIDEO_FRAMES training frames, upload them under
    `clips/<clip id>/`, and mark the clip ready. A missing or unreadable source marks the clip
    error with the reason. Other failures (storage down) put the clip back in the queue and raise."""
    clip, prefix = clip_claim(clip_id)
    try:
        with (
            clip_source_file(clip) as source,
            tempfile.TemporaryDirectory(prefix="lepus-clip-") as tmp,
        ):
            rendered = _video_render(clip, source, Path(tmp), heartbeat=heartbeat)
            video_key, poster_key = _video_upload(prefix, rendered)
    except (media.MediaError, SourceMissing) as error:
        return clip_media_failed(clip, error, what="clip")
    except BaseException:
        clip_requeue(clip_id)
        raise
    info = rendered.info
    return clip_media_ready(
        clip_id,
        video_key=video_key,
        poster_key=poster_key,
        frames_key=f"{prefix}/frames",
        frame_count=len(rendered.frames),
        duration=round(info.duration, 3),
        width=info.width,
        height=info.height,
    )
