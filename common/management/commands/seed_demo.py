"""Seed the demo: a VATEX-EVAL slice, synthetic videos transcoded by the Celery worker, a crowd
campaign over those clips and a curator account. Idempotent: running it again changes nothing."""

from __future__ import annotations

import io
import json
import secrets
from pathlib import Path
from typing import Any

from django.conf import settings
from django.core.management import call_command
from django.core.management.base import CommandParser

from annotation.models import Campaign
from common.management.base import LepusCommand

VATEX_EVAL_FILE = Path(settings.BASE_DIR) / "data" / "vatex_eval" / "vid_cans_score_dict.json"


def _run(name: str, *args: str) -> dict[str, Any]:
    """Call a management command with --json and return its JSON object."""
    out = io.StringIO()
    call_command(name, *args, "--json", stdout=out)
    text = out.getvalue().strip()
    return json.loads(text) if text else {}


def _curator_password() -> str:
    # Kept beside the demo database so a second `make demo` prints the same login.
    path = Path(settings.VAR_DIR) / "curator_password"
    if not path.exists():
        path.write_text(secrets.token_urlsafe(12), encoding="utf-8")
        path.chmod(0o600)
    return path.read_text(encoding="utf-8").strip()


class Command(LepusCommand):
    help = "Seed the demo data (VATEX-EVAL slice, synthetic videos, campaign, curator)."

    def add_arguments(self, parser: CommandParser) -> None:
        super().add_arguments(parser)
        parser.add_argument("--clips", type=int, default=24, help="How many VATEX-EVAL clips.")
        parser.add_argument("--campaign", default="demo", help="Slug of the demo campaign.")
        parser.add_argument(
            "--video-timeout",
            type=int,
            default=900,
            help="Seconds to wait for the Celery worker to transcode the videos.",
        )

    def handle(self, *args: Any, **options: Any) -> None:
        clips = int(options["clips"])
        slug = options["campaign"]
        self.note(f"importing {clips} VATEX-EVAL clips")
        imported = _run("import_vatex_eval", str(VATEX_EVAL_FILE), "--limit", str(clips))
        self.note("generating synthetic videos")
        videos_dir = Path(settings.VAR_DIR) / "demo-videos"
        generated = _run("make_demo_videos", "--clips", str(clips), "--out", str(videos_dir))
        self.note("transcoding them in the Celery worker")
        attached = _run(
            "attach_videos", str(videos_dir), "--wait", "--timeout", str(options["video_timeout"])
        )
        if not Campaign.objects.filter(slug=slug).exists():
            self.note(f"creating campaign {slug}")
            campaign = _run(
                "create_campaign",
                "--slug",
                slug,
                "--name",
                "Demo campaign",
                "--clips",
                str(clips),
                "--judgments-per-candidate",
                "3",
                "--completion-code",
                "LEPUS-DEMO",
            )
        else:
            campaign = {"slug": slug, "existing": True}
        password = _curator_password()
        # One argument: a generated password may start with "-", which argparse takes for an option.
        _run("create_curator", "--username", "curator", f"--password={password}")
        self.emit(
            {
                "campaign": slug,
                "campaign_created": campaign,
                "curator_username": "curator",
                "curator_password": password,
                "import": imported,
                "videos": generated,
                "attach": attached,
            },
            human=f"demo seeded: campaign {slug}, curator / {password}",
        )
