from __future__ import annotations

from pathlib import Path
from typing import Any

from django.conf import settings

from common.management.arguments import OUT_FOLDER, OVERWRITE, LazyBar, command_errors
from common.management.base import LepusCommand
from common.management.declared import Arg, flag
from common.media import MediaError
from datasets_app.services.video import demo_videos_make


class Command(LepusCommand):
    """Generate synthetic videos (lavfi test patterns with a sine tone, different per clip) for
    clips that have no video yet, named so that `attach_videos DIR` picks them up."""

    arguments = (
        Arg("--clips", type=int, default=10, help="How many clips (default 10)."),
        OUT_FOLDER.but(help="Output folder (default: <LEPUS_VAR_DIR>/demo-videos)."),
        Arg("--seconds", type=float, default=4.0, help="Length of each pre-cut clip (default 4)."),
        Arg("--height", type=int, default=240, help="Frame height (default 240)."),
        flag(
            "--full-sources",
            help="Write full-length sources <youtube id>.mkv to be cut, instead of pre-cut clips.",
        ),
        OVERWRITE.but(help="Rewrite existing files."),
    )

    def handle(self, *args: Any, **options: Any) -> None:
        directory = Path(options["out"] or Path(settings.VAR_DIR) / "demo-videos")
        progress = LazyBar(self, "synthesising videos")
        try:
            with command_errors(ValueError, MediaError, command=self):
                result = demo_videos_make(
                    directory=directory,
                    clips=options["clips"],
                    seconds=options["seconds"],
                    height=options["height"],
                    full_sources=options["full_sources"],
                    overwrite=options["overwrite"],
                    progress=progress,
                )
        finally:
            progress.close()
        payload = result.as_dict()
        self.emit(
            payload,
            human=f"{payload['written']} videos written, {payload['existing']} already there, in "
            f"{payload['directory']}; next: python manage.py attach_videos {payload['directory']}",
        )
