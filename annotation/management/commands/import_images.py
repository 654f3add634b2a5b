from __future__ import annotations

from typing import Any

from annotation.imports.images import images_import
from common.management.arguments import SCALE, refuse
from common.management.declared import Arg, flag
from common.models import JobStatus
from datasets_app.management.base import ImportCommand
from datasets_app.management.jobs import IN_PROCESS, JOB_TIMEOUT, jobs_start
from datasets_app.services.images import image_attach_jobs_create
from datasets_app.services.video import (
    video_attach_jobs_follow,
    video_attach_jobs_outcome,
)


class Command(ImportCommand):
    """Import still images from the generic image JSONL of docs/import-formats.md (image id, image
    file, references, candidates, optional judgments on a source scale mapped to 1–5) and process
    their files from DIR in a Celery job of the video pipeline: decode, display JPEG, one training
    frame, upload. Idempotent and all-or-nothing; every image file is checked before anything is
    written."""

    arguments = (
        Arg("path", help="A .jsonl file, one image per line."),
        Arg("--images", required=True, help="Folder holding the image files the lines name."),
        Arg(
            "--campaign",
            default="",
            help="Slug of the (imported) campaign the file's judgments go to; required when the "
            "file has judgments.",
        ),
        SCALE.but(
            default=None,
            help="The source scale of `overall` (default 1 5; a line's own `scale` wins).",
        ),
        flag(
            "--upload-sources",
            help="Copy the image files into storage first, for workers on other machines.",
        ),
        flag("--force", help="Also re-process images that are ready or queued."),
        flag("--wait", help="Follow the processing job to the end."),
        IN_PROCESS.but(help="Process the images in this process instead of a Celery worker."),
        JOB_TIMEOUT.but(
            help="With --wait: give up waiting after this many seconds (the job continues)."
        ),
    )

    def handle(self, *args: Any, **options: Any) -> None:
        result, files = self.staged(
            lambda progress: images_import(
                path=options["path"],
                images=options["images"],
                campaign_slug=options["campaign"],
                scale=tuple(options["scale"]) if options["scale"] else None,
                progress=progress,
            )
        )
        payload = result.as_dict()
        jobs = image_attach_jobs_create(
            sources=files,
            directory=options["images"],
            force=options["force"],
            upload_sources=options["upload_sources"],
        )
        payload["job_ids"] = [job.pk for job in jobs]
        payload["images_queued"] = sum(job.total for job in jobs)
        if jobs:
            jobs_start(self, jobs, in_process=options["in_process"], label="job", payload=payload)
        if jobs and (options["wait"] or options["in_process"]):
            try:
                finished = video_attach_jobs_follow(
                    job_ids=payload["job_ids"], timeout=options["timeout"]
                )
            except TimeoutError as error:
                refuse(self, str(error), {**payload, "ok": False, "error": str(error)})
            outcome = video_attach_jobs_outcome(jobs=finished)
            payload["processing"] = outcome
            if outcome["status"] != JobStatus.SUCCEEDED:
                refuse(
                    self,
                    f"image job ended {outcome['status']}: {outcome['error']}",
                    {**payload, "ok": False},
                )
        human = self.describe(payload)
        if jobs:
            human += f"\n  {payload['images_queued']} images queued for processing (job(s) "
            human += ", ".join(str(job_id) for job_id in payload["job_ids"]) + ")"
            if "processing" in payload:
                human += (
                    f"; ready {payload['processing']['ready']}, "
                    f"failed {payload['processing']['failed']}"
                )
        self.emit(payload, human=human)
