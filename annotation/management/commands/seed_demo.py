"""Seed the demo: the scene corpus (data/demo_scenes/: drawn videos transcoded by the Celery worker,
references, candidates that are exact or wrong in known ways) with a crowd campaign over it, a few
still images Pillow draws (`datasets_app.demo_images`) with a crowd campaign `<slug>-stills`, a
VATEX-EVAL slice as an imported campaign (real judgments, for the agreement and benchmark figures),
and a curator account. Idempotent: running it again changes nothing.

It calls the services the commands `import_candidates`, `make_demo_scenes`, `import_vatex_eval`,
`attach_videos --wait`, `create_campaign` and `create_curator` call, and reports what each would
print with --json."""

from __future__ import annotations

import secrets
from pathlib import Path
from typing import Any

from django.conf import settings
from django.core.management.base import CommandError

from annotation.crowd.services.campaigns import CampaignInvalid, campaign_counts, campaign_create
from annotation.imports import vatex_eval_import
from annotation.imports.images import images_import
from annotation.models import Campaign
from common.accounts import curator_save
from common.management.arguments import command_errors
from common.management.base import LepusCommand
from common.management.declared import Arg
from common.media import MediaError
from common.models import JobStatus
from datasets_app import demo_images, demo_scenes
from datasets_app.models import VideoAttachJob
from datasets_app.services.images import image_attach_jobs_create
from datasets_app.services.imports import ImportRejected, candidates_import
from datasets_app.services.video import (
    video_attach_job_publish,
    video_attach_jobs_create,
    video_attach_jobs_follow,
    video_attach_jobs_outcome,
    video_attach_jobs_summary,
)

VATEX_EVAL_FILE = Path(settings.BASE_DIR) / "data" / "vatex_eval" / "vid_cans_score_dict.json"
SCENES_FILE = Path(settings.BASE_DIR) / "data" / "demo_scenes" / "scenes.jsonl"


def _attach_and_wait(directory: Path, *, timeout: float) -> dict[str, Any]:
    """`attach_videos DIRECTORY --wait --timeout T`: the jobs sent to the Celery worker and
    followed to the end."""
    with command_errors(FileNotFoundError, ValueError):
        jobs, plan = video_attach_jobs_create(directory=directory)
    payload = video_attach_jobs_summary(jobs=jobs, plan=plan)
    return _run_and_wait(jobs, payload, timeout=timeout)


def _run_and_wait(
    jobs: list[VideoAttachJob], payload: dict[str, Any], *, timeout: float
) -> dict[str, Any]:
    """The jobs sent to the Celery worker and followed to the end; their outcome in `payload`."""
    if not jobs:
        return payload
    for job in jobs:
        video_attach_job_publish(job=job)
    with command_errors(TimeoutError):
        finished = video_attach_jobs_follow(job_ids=[job.pk for job in jobs], timeout=timeout)
    payload.update(video_attach_jobs_outcome(jobs=finished))
    if payload["status"] != JobStatus.SUCCEEDED:
        raise CommandError(
            f"video job(s) {', '.join(str(job.pk) for job in jobs)} ended "
            f"{payload['status']}: {payload['error']}"
        )
    return payload


def _curator_password() -> str:
    # Kept beside the demo database so a second `make demo` prints the same login.
    path = Path(settings.VAR_DIR) / "curator_password"
    if not path.exists():
        path.write_text(secrets.token_urlsafe(12), encoding="utf-8")
        path.chmod(0o600)
    return path.read_text(encoding="utf-8").strip()


class Command(LepusCommand):
    """Seed the demo data: the scene corpus and a crowd campaign over it, a few drawn still images
    and a crowd campaign over them, a VATEX-EVAL slice (imported judgments), a curator."""

    arguments = (
        Arg(
            "--clips",
            type=int,
            default=24,
            help="How many VATEX-EVAL clips to import (default 24).",
        ),
        Arg(
            "--scenes",
            type=int,
            default=demo_scenes.DEFAULT_SCENES,
            help="How many of the shipped scenes the crowd campaign rates (default: all 24).",
        ),
        Arg("--campaign", default="demo", help="Slug of the demo campaign."),
        Arg(
            "--video-timeout",
            type=int,
            default=900,
            help="Seconds to wait for the Celery worker to transcode the videos.",
        ),
    )

    def handle(self, *args: Any, **options: Any) -> None:
        clips = int(options["clips"])
        slug = options["campaign"]
        self.note(f"importing {clips} VATEX-EVAL clips")
        with command_errors(ImportRejected):
            imported = vatex_eval_import(path=VATEX_EVAL_FILE, limit=clips).as_dict()
        scenes = int(options["scenes"])
        if not 1 <= scenes <= demo_scenes.DEFAULT_SCENES:
            raise CommandError(f"--scenes must be between 1 and {demo_scenes.DEFAULT_SCENES}")
        self.note("importing the demo scenes (clips, references, candidates)")
        with command_errors(ImportRejected):
            scene_import = candidates_import(path=SCENES_FILE).as_dict()
        self.note(f"drawing {scenes} scene videos with ffmpeg")
        videos_dir = Path(settings.VAR_DIR) / "demo-scenes"
        with command_errors(ValueError, MediaError):
            written, existing = demo_scenes.render_videos(videos_dir, count=scenes)
        generated = {
            "directory": str(videos_dir.resolve()),
            "written": len(written),
            "existing": len(existing),
        }
        self.note("transcoding them in the Celery worker")
        attached = _attach_and_wait(videos_dir, timeout=float(options["video_timeout"]))
        stills = self._stills(timeout=float(options["video_timeout"]))
        scene_clips = [scene.clip_id for scene in demo_scenes.make_scenes(scenes)]
        campaign = self._demo_campaign(
            slug,
            name="Demo campaign",
            clip_ids=scene_clips,
            unit="clips",
            completion_code="LEPUS-DEMO",
            screen_out_code="LEPUS-DEMO-SCREENED",
        )
        stills["campaign"] = self._demo_campaign(
            f"{slug}-stills",
            name="Demo still images",
            clip_ids=[still.image_id for still in demo_images.STILLS],
            unit="images",
            completion_code="LEPUS-DEMO-STILLS",
        )
        password = _curator_password()
        curator_save(username="curator", password=password)
        self.emit(
            {
                "campaign": slug,
                "campaign_created": campaign,
                "curator_username": "curator",
                "curator_password": password,
                "import": imported,
                "scenes": scene_import,
                "videos": generated,
                "attach": attached,
                "stills": stills,
            },
            human=f"demo seeded: campaign {slug}, curator / {password}",
        )

    def _stills(self, *, timeout: float) -> dict[str, Any]:
        """`import_images stills.jsonl --images DIR --wait`: the demo's drawn still images, their
        references and candidates, processed by the Celery worker."""
        self.note("drawing the demo's still images and processing them in the Celery worker")
        folder = Path(settings.VAR_DIR) / "demo-stills"
        path = demo_images.write_stills(folder)
        with command_errors(ImportRejected):
            result, files = images_import(path=path, images=folder)
        jobs = image_attach_jobs_create(sources=files, directory=folder)
        payload = {"import": result.as_dict(), "job_ids": [job.pk for job in jobs]}
        return _run_and_wait(jobs, payload, timeout=timeout)

    def _demo_campaign(
        self, slug: str, *, name: str, clip_ids: list[str], unit: str, **options: Any
    ) -> dict[str, Any]:
        """A crowd campaign of 3 judgments per candidate over these clips (created once); its
        clip count is reported under `unit` ("clips", or "images" for the stills)."""
        if Campaign.objects.filter(slug=slug).exists():
            return {"slug": slug, "existing": True}
        self.note(f"creating campaign {slug}")
        with command_errors(CampaignInvalid):
            created = campaign_create(
                slug=slug, name=name, judgments_per_candidate=3, clip_vatex_ids=clip_ids, **options
            )
        counts = campaign_counts(campaign=created)
        return {"slug": created.slug, "candidates": counts["candidates"], unit: counts["clips"]}
