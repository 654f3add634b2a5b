"""manage.py convert_activitynet_foil --right R --foil F --segments T1 --references T2
[--train TRAIN] [--videos DIR] --out DIR [--json]

ActivityNet-FOIL's official files (the EMScore authors' release: the correct and foiled paragraphs,
anet_entities_test_1/2.json, ActivityNet Captions' train.json) into a clip import, a paragraph FOIL
file and EMScore's IDF corpus (`training_bridge.rigel.activitynet_foil`). The next steps are printed:
import the clips, attach the videos, create the campaign, run `evaluate_rigel --protocol foil`.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from django.core.management.base import CommandError

from common.management.arguments import command_errors
from common.management.base import LepusCommand
from common.management.declared import Arg
from training_bridge.rigel.activitynet_foil import (
    SYSTEM,
    ActivityNetFoilError,
    convert_files,
    write,
)

# The official files, each a required option: (name, what it is).
OFFICIAL_FILES = (
    ("--right", "final_right_video_sentences.json (correct paragraphs)"),
    ("--foil", "final_foil_video_sentences.json (foiled paragraphs)"),
    ("--segments", "anet_entities_test_1.json (sentence segments)"),
    ("--references", "anet_entities_test_2.json (the references)"),
)


class Command(LepusCommand):
    """Convert ActivityNet-FOIL's official files into a clip import and a paragraph FOIL file."""

    arguments = (
        *(Arg(name, required=True, help=what) for name, what in OFFICIAL_FILES),
        Arg("--train", help="ActivityNet Captions train.json: write EMScore's IDF corpus too"),
        Arg("--videos", help="Keep only the videos this folder has a file for (<video id>.mp4)"),
        Arg("--out", required=True, help="Folder to write the files into"),
    )

    def handle(self, *args: Any, **options: Any) -> None:
        with command_errors(ActivityNetFoilError):
            conversion = convert_files(
                right=Path(options["right"]),
                foil=Path(options["foil"]),
                segments=Path(options["segments"]),
                references=Path(options["references"]),
                videos=Path(options["videos"]) if options["videos"] else None,
                train=Path(options["train"]) if options["train"] else None,
            )
        if not conversion.paragraphs:
            raise CommandError(
                f"no video could be converted (left out: {dict(conversion.skipped)})"
            )
        paths = write(conversion, Path(options["out"]))
        summary = {"ok": True, **conversion.summary(), "files": paths}
        steps = [
            f"python manage.py import_candidates {paths['clips']}",
            "python manage.py attach_videos VIDEOS_DIR --wait",
            f"python manage.py create_campaign --slug anet-foil --system {SYSTEM}",
            "python manage.py evaluate_rigel --runs FREE,BASED --campaign anet-foil "
            f"--protocol foil --foil-file {paths['foil_file']}"
            + (f" --set emscore_idf_corpus={paths['idf_corpus']}" if "idf_corpus" in paths else "")
            + " --json",
        ]
        summary["next"] = steps
        skipped = ", ".join(f"{n} {why}" for why, n in sorted(conversion.skipped.items()))
        self.emit(
            summary,
            human=(
                f"{summary['videos']} videos, {summary['segments']} segments written to "
                f"{options['out']}"
                + (f" (left out: {skipped})" if skipped else "")
                + "\nnext:\n  "
                + "\n  ".join(steps)
            ),
        )
