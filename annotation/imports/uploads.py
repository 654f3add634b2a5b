"""Imports from the import page: a curator uploads a file, it is stored, and a Celery job imports
it with the same importer as the command line.

`import_upload_create` checks what can be checked without reading the file (kind, name, size,
campaign slug), streams the file into storage (`imports/<uuid>/<name>`, outside any transaction)
and queues the job after commit. `import_upload_run` (the task) claims the job, copies the file
to a temporary folder under its uploaded name and runs the importer: the whole file is validated
before anything is written, and the writes happen in one transaction, so a refused file writes
nothing. The refusal is the command's own message (file, line, field), kept whole in `error` and
in parts in `rejection`.

A video archive is unpacked safely (`datasets_app.services.imports.archives`: no path leaving
the folder, no links, member and byte limits), its files are matched to clips and copied to
storage, and the video jobs of `attach_videos --upload-sources` are queued; the upload's result
names them.

Progress: validation runs before the import's transaction, so its progress is written as it
goes; inside the transaction nothing is written (such an UPDATE would stay invisible until the
commit and be rolled back with a refusal), and the page says "writing".
"""

from __future__ import annotations

import logging
import re
import tempfile
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import IO, Any, Protocol

from django.conf import settings
from django.contrib.auth.models import AnonymousUser, User
from django.db import connection, transaction

from annotation.imports.images import images_import
from annotation.imports.judgments import judgments_import
from annotation.imports.vatex_eval import vatex_eval_import
from annotation.models import ImportUpload, UploadKind
from common import storage
from common.jobs import JobCancelled, job_claim, job_finish, job_progress, job_requeue
from common.models import JobStatus
from common.tasks import enqueue, task_named
from datasets_app.services.images import image_attach_jobs_create
from datasets_app.services.imports import (
    ImportRejected,
    ImportResult,
    candidates_import,
    vatex_import,
)
from datasets_app.services.imports.archives import ARCHIVE_SUFFIXES, unpacked_archive
from datasets_app.services.video import (
    video_attach_job_publish,
    video_attach_jobs_create,
    video_attach_jobs_summary,
)

logger = logging.getLogger(__name__)

# What each kind accepts, by the end of the file's name.
KIND_SUFFIXES: dict[str, tuple[str, ...]] = {
    UploadKind.CANDIDATES: (".jsonl", ".csv"),
    UploadKind.VATEX: (".json",),
    UploadKind.JUDGMENTS: (".jsonl", ".csv"),
    UploadKind.VATEX_EVAL: (".json",),
    UploadKind.VIDEOS: ARCHIVE_SUFFIXES,
    UploadKind.IMAGES: ARCHIVE_SUFFIXES,
}
# Kinds whose file may carry judgments for a campaign (required for JUDGMENTS).
CAMPAIGN_KINDS = (UploadKind.JUDGMENTS, UploadKind.IMAGES)
CAMPAIGN_SLUG = re.compile(r"^[a-z0-9][a-z0-9_-]{0,49}$")
UNSAFE_NAME_CHARACTERS = re.compile(r"[^A-Za-z0-9._-]+")
PROGRESS_INTERVAL = 0.5  # seconds between two progress writes while validating


class UploadRefused(ValueError):
    """The upload itself is unacceptable (before any import): names the form field."""

    def __init__(self, field: str, message: str) -> None:
        self.field = field
        self.message = message
        super().__init__(message)


class UploadedFile(Protocol):
    name: str | None
    size: int | None

    def open(self, mode: str = ...) -> Any: ...


def upload_file_name(name: str) -> str:
    """The uploaded file's base name with only safe characters (it becomes a storage key and the
    name in the importer's messages)."""
    base = Path(name.replace("\\", "/")).name
    clean = UNSAFE_NAME_CHARACTERS.sub("_", base).strip("._")[:200]
    return clean or "upload"


def import_upload_check(
    *, kind: str, file_name: str, size: int, campaign_slug: str = "", file_format: str = ""
) -> None:
    """Refuse an upload that cannot be imported whatever it holds (`UploadRefused`)."""
    if kind not in UploadKind.values:
        raise UploadRefused("kind", f"{kind!r} is not a kind of import")
    limit = settings.LEPUS_MAX_UPLOAD_BYTES
    if size > limit:
        raise UploadRefused(
            "file", f"the file is {size} bytes, over the upload limit of {limit} bytes"
        )
    if size == 0:
        raise UploadRefused("file", "the file is empty")
    suffixes = KIND_SUFFIXES[kind]
    if not file_format and not file_name.lower().endswith(suffixes):
        raise UploadRefused(
            "file",
            f"{UploadKind(kind).label} must be a file ending in {', '.join(suffixes)}",
        )
    if file_format and (
        kind not in (UploadKind.CANDIDATES, UploadKind.JUDGMENTS)
        or file_format not in ("jsonl", "csv")
    ):
        raise UploadRefused("file_format", "a format is chosen only for candidates or judgments")
    if kind == UploadKind.JUDGMENTS and not CAMPAIGN_SLUG.match(campaign_slug):
        raise UploadRefused(
            "campaign",
            "judgments go into a campaign: give its slug (lowercase letters, digits, - and _)",
        )
    if kind == UploadKind.IMAGES and campaign_slug and not CAMPAIGN_SLUG.match(campaign_slug):
        raise UploadRefused("campaign", "a campaign slug is lowercase letters, digits, - and _")
    if kind not in CAMPAIGN_KINDS and campaign_slug:
        raise UploadRefused(
            "campaign", "only judgments (or still images' judgments) go into a campaign"
        )


def import_upload_create(
    *,
    kind: str,
    upload: UploadedFile,
    user: User | AnonymousUser | None,
    campaign_slug: str = "",
    file_format: str = "",
) -> ImportUpload:
    """Store the uploaded file and queue its import job (published after commit)."""

    file_name = upload_file_name(upload.name or "")
    size = int(upload.size or 0)
    import_upload_check(
        kind=kind,
        file_name=file_name,
        size=size,
        campaign_slug=campaign_slug,
        file_format=file_format,
    )
    key = f"imports/{uuid.uuid4().hex}/{file_name}"
    with upload.open("rb") as handle:
        storage.put_stream(key, handle)
    with transaction.atomic():
        job = ImportUpload.objects.create(
            kind=kind,
            file_name=file_name,
            size=size,
            storage_key=key,
            campaign_slug=campaign_slug,
            file_format=file_format,
            requested_by=user if isinstance(user, User) else None,
        )
        enqueue(task_named("annotation.import_upload"), job.pk)
    return job


def import_upload_from_path(
    *,
    kind: str,
    path: Path,
    user: User | None = None,
    campaign_slug: str = "",
    file_format: str = "",
) -> ImportUpload:
    """`import_upload_create` for a file on this machine (tests, scripts)."""
    return import_upload_create(
        kind=kind,
        upload=_LocalFile(path),
        user=user,
        campaign_slug=campaign_slug,
        file_format=file_format,
    )


class _LocalFile:
    def __init__(self, path: Path) -> None:
        self.path = path
        self.name: str | None = path.name
        self.size: int | None = path.stat().st_size

    def open(self, mode: str = "rb") -> IO[bytes]:
        return open(self.path, "rb")


def import_upload_retry(*, job_id: int) -> ImportUpload:
    """Queue a failed or cancelled upload's import again (its stored file is kept)."""

    with transaction.atomic():
        job = ImportUpload.objects.select_for_update().get(pk=job_id)
        if not job_requeue(job=job):
            raise ValueError(
                f"import {job_id} is {job.status}; only failed or cancelled imports retry"
            )
        ImportUpload.objects.filter(pk=job.pk).update(result={}, rejection={})
        enqueue(task_named("annotation.import_upload"), job.pk)
    job.refresh_from_db()
    return job


# --- The job ----------------------------------------------------------------------------------


def import_upload_run(*, job_id: int, task_id: str = "") -> ImportUpload | None:
    """Import a queued upload; None when another worker has it or it is finished."""
    job = job_claim(model=ImportUpload, job_id=job_id, task_id=task_id)
    if job is None:
        return None
    try:
        with tempfile.TemporaryDirectory(prefix="lepus-upload-") as folder:
            workdir = Path(folder)
            local = workdir / job.file_name
            job_progress(job=job, fraction=0.02, message="fetching the uploaded file")
            with storage.open_file(job.storage_key) as source, open(local, "wb") as target:
                while chunk := source.read(1024 * 1024):
                    target.write(chunk)
            result = _RUNNERS[job.kind](job, local, workdir)
    except ImportRejected as error:
        rejection = _as_uploaded(error, local_path=str(workdir / job.file_name), job=job)
        job_finish(
            job=job,
            status=JobStatus.FAILED,
            error=rejection.describe(),
            rejection={**rejection.as_dict(), "message": rejection.message},
            progress_message="refused: nothing was written",
        )
    except JobCancelled:
        job_finish(job=job, status=JobStatus.CANCELLED, error="Cancelled by a curator.")
    except Exception as error:
        if storage.is_unavailable(error):
            job_finish(job=job, status=JobStatus.FAILED, error=f"{type(error).__name__}: {error}")
            raise storage.StorageUnavailable(str(error)) from error
        logger.exception("import upload %s failed", job.pk)
        job_finish(job=job, status=JobStatus.FAILED, error=f"{type(error).__name__}: {error}")
    else:
        job_finish(job=job, status=JobStatus.SUCCEEDED, result=result, progress_message="imported")
    return job


def _as_uploaded(error: ImportRejected, *, local_path: str, job: ImportUpload) -> ImportRejected:
    """The refusal as the command would word it for a file of the uploaded name (the importer
    saw a temporary path)."""
    file = job.file_name if error.file in (local_path, "") else error.file
    return ImportRejected(
        file=file, message=error.message, line=error.line, field=error.field, column=error.column
    )


def _stage_progress(job: ImportUpload) -> Callable[[str, int, int], None]:
    """The importers' (stage, done, total) callback as job progress, while validating."""
    last = 0.0

    def progress(stage: str, done: int, total: int) -> None:
        nonlocal last
        if connection.in_atomic_block:
            return  # inside the import's one transaction (see the module docstring)
        now = time.monotonic()
        if now - last < PROGRESS_INTERVAL:
            return
        last = now
        fraction = 0.1 + (0.4 * done / total if total else 0.0)
        job_progress(job=job, fraction=fraction, message=f"{stage}: {done} rows checked")

    return progress


def _starting(job: ImportUpload) -> Callable[[str, int, int], None]:
    job_progress(
        job=job,
        fraction=0.05,
        message="validating every row, then writing everything in one transaction",
    )
    return _stage_progress(job)


def _run_candidates(job: ImportUpload, path: Path, workdir: Path) -> dict[str, Any]:
    return _result(
        job,
        candidates_import(
            path=path,
            file_format=job.file_format or None,
            user=job.requested_by,
            progress=_starting(job),
        ),
    )


def _run_vatex(job: ImportUpload, path: Path, workdir: Path) -> dict[str, Any]:
    return _result(job, vatex_import(path=path, user=job.requested_by, progress=_starting(job)))


def _run_judgments(job: ImportUpload, path: Path, workdir: Path) -> dict[str, Any]:
    return _result(
        job,
        judgments_import(
            path=path,
            campaign_slug=job.campaign_slug,
            file_format=job.file_format or None,
            user=job.requested_by,
            progress=_starting(job),
        ),
    )


def _run_vatex_eval(job: ImportUpload, path: Path, workdir: Path) -> dict[str, Any]:
    return _result(
        job, vatex_eval_import(path=path, user=job.requested_by, progress=_starting(job))
    )


def _run_videos(job: ImportUpload, path: Path, workdir: Path) -> dict[str, Any]:
    job_progress(job=job, fraction=0.05, message="unpacking the archive")
    with unpacked_archive(path=path, name=job.file_name, workdir=workdir) as unpacked:

        def uploaded(done: int, total: int) -> None:
            job_progress(
                job=job,
                fraction=0.2 + 0.7 * done / max(total, 1),
                message=f"copying videos to storage: {done} of {total}",
            )

        job_progress(job=job, fraction=0.15, message=f"{len(unpacked.files)} files unpacked")
        try:
            jobs, plan = video_attach_jobs_create(
                directory=workdir / "unpacked",
                user=job.requested_by,
                upload_sources=True,
                progress=uploaded,
            )
        except ValueError as error:
            raise ImportRejected(file=job.file_name, message=str(error)) from error
    if not jobs and not (plan.skipped_ready or plan.skipped_in_progress):
        shown = ", ".join(plan.unmatched_files[:5]) + (
            " …" if len(plan.unmatched_files) > 5 else ""
        )
        raise ImportRejected(
            file=job.file_name,
            message=f"none of its {plan.files} video files is named after a stored clip "
            f"(<clip id>.<ext>) or its YouTube video (<youtube id>.<ext>)"
            + (f"; unmatched: {shown}" if shown else ""),
        )
    for video_job in jobs:
        try:
            video_attach_job_publish(job=video_job)
        except Exception as error:  # broker down: the video job stays queued (Data page: retry)
            logger.warning("video job %s not published: %s", video_job.pk, error)
    summary = video_attach_jobs_summary(jobs=jobs, plan=plan)
    return {**summary, "ok": True, "file": job.file_name, "unpacked_bytes": unpacked.bytes}


def _run_images(job: ImportUpload, path: Path, workdir: Path) -> dict[str, Any]:
    """An archive of one image JSONL and the image files it names: imported as
    `import_images FILE --images DIR --upload-sources` would, then the images queued."""
    job_progress(job=job, fraction=0.05, message="unpacking the archive")
    with unpacked_archive(path=path, name=job.file_name, workdir=workdir) as unpacked:
        lines = [file for file in unpacked.files if file.suffix.lower() == ".jsonl"]
        if len(lines) != 1:
            raise ImportRejected(
                file=job.file_name,
                message=f"the archive holds {len(lines)} .jsonl files; it needs exactly one "
                "image JSONL beside its image files",
            )
        job_progress(job=job, fraction=0.15, message=f"{len(unpacked.files)} files unpacked")
        try:
            result, files = images_import(
                path=lines[0],
                images=lines[0].parent,
                campaign_slug=job.campaign_slug,
                user=job.requested_by,
                progress=_stage_progress(job),
            )
        except ImportRejected as error:
            raise ImportRejected(
                file=f"{job.file_name}: {lines[0].name}",
                message=error.message,
                line=error.line,
                field=error.field,
                column=error.column,
            ) from error
        jobs = image_attach_jobs_create(
            sources=files, directory=lines[0].parent, user=job.requested_by, upload_sources=True
        )
    for image_job in jobs:
        try:
            video_attach_job_publish(job=image_job)
        except Exception as error:  # broker down: the job stays queued (Data page: retry)
            logger.warning("image job %s not published: %s", image_job.pk, error)
    return {
        **_result(job, result),
        "job_ids": [image_job.pk for image_job in jobs],
        "images_queued": sum(image_job.total for image_job in jobs),
        "unpacked_bytes": unpacked.bytes,
    }


def _result(job: ImportUpload, result: ImportResult) -> dict[str, Any]:
    # The importer saw a temporary path; the result names the uploaded file, as a command given
    # that file's name would.
    return {**result.as_dict(), "file": job.file_name}


_RUNNERS: dict[str, Callable[[ImportUpload, Path, Path], dict[str, Any]]] = {
    UploadKind.CANDIDATES: _run_candidates,
    UploadKind.VATEX: _run_vatex,
    UploadKind.JUDGMENTS: _run_judgments,
    UploadKind.VATEX_EVAL: _run_vatex_eval,
    UploadKind.VIDEOS: _run_videos,
    UploadKind.IMAGES: _run_images,
}


def upload_declared_too_large(content_length: str | None) -> bool:
    """Whether a request declares a body over the upload limit (checked before Django reads the
    body, so an oversize upload is refused without being spooled to disk). The slack covers the
    multipart framing and the form's other fields."""
    try:
        declared = int(content_length or 0)
    except ValueError:
        return True
    return declared > settings.LEPUS_MAX_UPLOAD_BYTES + 64 * 1024
