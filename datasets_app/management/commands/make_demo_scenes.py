from __future__ import annotations

from pathlib import Path
from typing import Any

from django.conf import settings

from common.management.arguments import OUT_FOLDER, OVERWRITE, command_errors
from common.management.base import LepusCommand
from common.management.declared import Arg, flag
from common.media import MediaError
from datasets_app import demo_scenes


class Command(LepusCommand):
    """Write the demo's scene corpus: scenes.jsonl (clips, references and candidates for
    `import_candidates`), intended.jsonl (each candidate's flaw and intended quality) and the drawn
    videos <clip id>.mp4 for `attach_videos`. The same --scenes and --seed give the same files."""

    arguments = (
        OUT_FOLDER.but(help="Folder (default: <LEPUS_VAR_DIR>/demo-scenes)."),
        Arg(
            "--scenes",
            type=int,
            default=demo_scenes.DEFAULT_SCENES,
            help="How many scenes (default 24).",
        ),
        Arg("--seed", type=int, default=demo_scenes.DEFAULT_SEED, help="Random seed."),
        flag("--no-videos", help="Write the two JSONL files only."),
        OVERWRITE.but(help="Redraw videos that exist."),
    )

    def handle(self, *args: Any, **options: Any) -> None:
        folder = Path(options["out"] or Path(settings.VAR_DIR) / "demo-scenes")
        count, seed = options["scenes"], options["seed"]
        with command_errors(ValueError, MediaError, command=self):
            scenes_path, intended_path = demo_scenes.write_corpus(folder, count=count, seed=seed)
            written: list[str] = []
            existing: list[str] = []
            if not options["no_videos"]:
                bar = self.progress_bar(total=count, description="drawing scenes")

                def progress(done: int, total: int) -> None:
                    bar.n = done
                    bar.refresh()

                try:
                    written, existing = demo_scenes.render_videos(
                        folder,
                        count=count,
                        seed=seed,
                        overwrite=options["overwrite"],
                        progress=progress,
                    )
                finally:
                    bar.close()
        self.emit(
            {
                "ok": True,
                "directory": str(folder.resolve()),
                "scenes": count,
                "seed": seed,
                "scenes_file": str(scenes_path.resolve()),
                "intended_file": str(intended_path.resolve()),
                "videos_written": len(written),
                "videos_existing": len(existing),
            },
            human=f"{count} scenes in {folder}: {len(written)} videos drawn, {len(existing)} already there; "
            f"next: import_candidates {scenes_path} and attach_videos {folder}",
        )
