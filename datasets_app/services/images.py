"""Still images, the paper's T = 1 input: queue imported images for processing and, in a Celery
worker, decode each with Pillow, write a browser-safe display JPEG and ONE training frame
(`<frames_key>/000.jpg`, frame_count = 1), and upload them next to the clips' files.

Images ride the video pipeline's job (`VideoAttachJob`, `datasets_app.services.video`; the
per-clip rules are `datasets_app.services.clip_media`'s): one job may hold videos and images, its
run dispatches each clip by modality (`clip_process_media`), and the claim, progress, cancel,
retry and outage handling are the video job's. The same rules hold: never
inside a database transaction, a broken source marks the clip error with the reason and such a
clip is never served.

A source is refused before it is decoded when its file is larger than `LEPUS_IMAGE_MAX_BYTES` or
its header announces more than `LEPUS_IMAGE_MAX_PIXELS` pixels (decompression bombs); Pillow's own
`Image.MAX_IMAGE_PIXELS` guard is set to the same limit while decoding, so a file whose header lies
is stopped by Pillow.
"""

from __future__ import annotations

import logging
import tempfile
import warnings
from pathlib import Path

from django.conf import settings
from django.contrib.auth.models import User
from django.db import transaction
from PIL import Image, ImageOps, UnidentifiedImageError

from common import storage
from datasets_app.models import Clip, ClipModality, ClipStatus, VideoAttachJob
from datasets_app.services.clip_media import (
    ClipVideoOutcome,
    SourceMissing,
    clip_claim,
    clip_media_failed,
    clip_media_ready,
    clip_requeue,
    clip_source_file,
)

logger = logging.getLogger(__name__)

IMAGE_EXTENSIONS = (".jpg", ".jpeg", ".png", ".webp", ".gif", ".bmp", ".tif", ".tiff")
# Formats Pillow may decode here (whatever the file's name says).
IMAGE_FORMATS = ("JPEG", "PNG", "WEBP", "GIF", "BMP", "TIFF", "MPO")
DISPLAY_QUALITY = 88
FRAME_QUALITY = 95


class ImageRefused(Exception):
    """The source is not an image Lepus decodes, or it is over the size limits."""


def image_decode(path: Path) -> Image.Image:
    """The image of `path` as RGB, upright (EXIF orientation applied), transparent parts on white,
    scaled so that its longest side is at most `LEPUS_IMAGE_MAX_SIDE`. `ImageRefused` says why
    not."""
    size = path.stat().st_size
    if size > settings.LEPUS_IMAGE_MAX_BYTES:
        raise ImageRefused(
            f"the image file is {size} bytes; the limit is {settings.LEPUS_IMAGE_MAX_BYTES} "
            "(LEPUS_IMAGE_MAX_BYTES)"
        )
    limit = settings.LEPUS_IMAGE_MAX_PIXELS
    previous = Image.MAX_IMAGE_PIXELS
    try:
        # Pillow warns above MAX_IMAGE_PIXELS and raises above twice that: make both an error.
        Image.MAX_IMAGE_PIXELS = limit
        with warnings.catch_warnings():
            warnings.simplefilter("error", Image.DecompressionBombWarning)
            with Image.open(path) as opened:
                if opened.format not in IMAGE_FORMATS:
                    raise ImageRefused(f"{opened.format} images are not accepted")
                width, height = opened.size
                if width < 1 or height < 1 or width * height > limit:
                    raise ImageRefused(
                        f"the image is {width}x{height} pixels; the limit is {limit} pixels "
                        "(LEPUS_IMAGE_MAX_PIXELS)"
                    )
                opened.seek(0)  # an animated GIF or WebP: its first frame
                image = ImageOps.exif_transpose(opened)
                image.load()
    except (Image.DecompressionBombError, Image.DecompressionBombWarning) as error:
        raise ImageRefused(
            f"the image is too large to decode ({error}); the limit is {limit} pixels "
            "(LEPUS_IMAGE_MAX_PIXELS)"
        ) from error
    except UnidentifiedImageError as error:
        raise ImageRefused("the file is not an image Lepus can read") from error
    except (OSError, SyntaxError, ValueError) as error:  # truncated or corrupt data
        raise ImageRefused(f"the image cannot be decoded: {error}") from error
    finally:
        Image.MAX_IMAGE_PIXELS = previous
    if image.mode in ("RGBA", "LA", "PA") or (image.mode == "P" and "transparency" in image.info):
        rgba = image.convert("RGBA")
        image = Image.new("RGB", rgba.size, (255, 255, 255))
        image.paste(rgba, mask=rgba.getchannel("A"))
    else:
        image = image.convert("RGB")
    image.thumbnail((settings.LEPUS_IMAGE_MAX_SIDE, settings.LEPUS_IMAGE_MAX_SIDE))
    return image


def clip_process_image(*, clip_id: int) -> ClipVideoOutcome:
    """Decode the image clip's source, upload its display JPEG (`clips/<id>/image.jpg`) and its
    one training frame (`clips/<id>/frames/000.jpg`), and mark it ready. An unreadable, missing or
    oversized source marks the clip error with the reason. Other failures (storage down) put the
    clip back in the queue and raise."""
    clip, prefix = clip_claim(clip_id, modality=ClipModality.IMAGE)
    try:
        with (
            clip_source_file(clip) as source,
            tempfile.TemporaryDirectory(prefix="lepus-image-") as tmp,
        ):
            work = Path(tmp)
            image = image_decode(source)
            display = work / "image.jpg"
            image.save(display, "JPEG", quality=DISPLAY_QUALITY, optimize=True, progressive=True)
            (work / "frames").mkdir()
            frame = work / "frames" / "000.jpg"
            image.save(frame, "JPEG", quality=FRAME_QUALITY)
            # Uploads: no transaction is open; the clip is not servable until the update below.
            storage.delete_prefix(f"{prefix}/frames")
            image_key = storage.put_file(f"{prefix}/image.jpg", display)
            storage.put_file(f"{prefix}/frames/000.jpg", frame)
    except (ImageRefused, SourceMissing) as error:
        return clip_media_failed(clip, error, what="image")
    except BaseException:
        clip_requeue(clip_id)
        raise
    return clip_media_ready(
        clip_id,
        image_key=image_key,
        frames_key=f"{prefix}/frames",
        frame_count=1,
        width=image.width,
        height=image.height,
    )


def image_attach_jobs_create(
    *,
    sources: dict[str, Path],
    directory: str | Path,
    user: User | None = None,
    force: bool = False,
    upload_sources: bool = False,
) -> list[VideoAttachJob]:
    """Record each image clip's source file ({image id: path}) and queue the clips in one job of
    the video pipeline (published by the caller: `video_attach_job_publish`, or run in process).
    Clips already ready, queued or processing are left alone unless `force`. By default a source
    key is the file's absolute path (workers on this machine's disk); `upload_sources` copies each
    file into storage first (`sources/images/<image id><suffix>`). No job when nothing is left."""
    rows = dict(
        Clip.objects.filter(vatex_id__in=list(sources), modality=ClipModality.IMAGE).values_list(
            "vatex_id", "status"
        )
    )
    wanted = sorted(
        image_id
        for image_id, status in rows.items()
        if force or status not in (ClipStatus.READY, ClipStatus.QUEUED, ClipStatus.PROCESSING)
    )
    if not wanted:
        return []
    keys: dict[str, str] = {}
    for image_id in wanted:
        path = sources[image_id].resolve()
        # Uploads happen before (outside) the transaction below.
        keys[image_id] = (
            storage.put_file(f"sources/images/{image_id}{path.suffix.lower()}", path)
            if upload_sources
            else str(path)
        )
    with transaction.atomic():
        for image_id in wanted:
            Clip.objects.filter(vatex_id=image_id).update(
                source_key=keys[image_id][:500], status=ClipStatus.QUEUED, error_reason=""
            )
        clip_ids = list(
            Clip.objects.filter(vatex_id__in=wanted)
            .order_by("vatex_id")
            .values_list("pk", flat=True)
        )
        job = VideoAttachJob.objects.create(
            directory=str(Path(directory).resolve())[:1000],
            requested_by=user if user is not None and user.is_authenticated else None,
            force=force,
            clip_ids=clip_ids,
            total=len(clip_ids),
            summary={"images": len(clip_ids), "skipped": len(rows) - len(clip_ids)},
        )
    return [job]
