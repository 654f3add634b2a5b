"""manage.py score --run ID --input FILE.jsonl --json

Scores (video, references, candidate) triples with a succeeded training run, in this process.
Input: one JSON object per line,

    {"video": "<local MP4 file, local folder of frames, or an ingested clip id>",
     "references": ["...", ...],          # absent or [] for a reference-free run
     "candidate": "..."}

or, for a still image (one frame, T = 1, through the image path), "image": "<local JPEG/PNG/WebP
file>" instead of "video".

Output: {"run": id, "count": n, "scores": [s_1, ..., s_n]}, one score in [0, 1] per input line, in
order (without --json: one score per line).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from django.core.exceptions import ValidationError
from django.core.management.base import CommandError

from common.management.arguments import found
from common.management.base import LepusCommand
from common.management.declared import Arg
from training_bridge.management.commands.evaluate_rigel import check_preset
from training_bridge.management.options import PRESET, TRAINING_RUN
from training_bridge.models import TrainingRun
from training_bridge.services.scoring import score_examples, score_input_examples

MAX_LINES = 100_000


class Command(LepusCommand):
    """Score caption triples from a JSONL file with a trained Rigel run."""

    arguments = (
        TRAINING_RUN,
        Arg("--input", required=True, help="JSONL file of triples."),
        PRESET.but(
            help="Check that the run was trained with this visual-input preset (it scores with "
            "the frames and resolution it was trained on)."
        ),
    )

    def handle(self, *args: Any, **options: Any) -> None:
        run = found(
            TrainingRun.objects.select_related("release").filter(pk=options["run"]).first(),
            f"training run {options['run']} does not exist",
        )
        if not run.can_score:
            raise CommandError(
                f"training run {run.pk} is {run.status}; only a succeeded run scores"
            )
        if options["preset"]:
            check_preset([run], options["preset"])
        lines = read_lines(Path(options["input"]))
        try:
            examples = score_input_examples(run=run, lines=lines)
        except ValidationError as error:
            raise CommandError(f"{options['input']}: {'; '.join(error.messages)}")
        scores = score_examples(run=run, examples=examples)
        self.emit(
            {"run": run.pk, "count": len(scores), "scores": scores},
            human="\n".join(f"{score:.6f}" for score in scores),
        )


def read_lines(path: Path) -> list[dict[str, Any]]:
    if not path.is_file():
        raise CommandError(f"{path} does not exist")
    lines: list[dict[str, Any]] = []
    with path.open(encoding="utf-8") as handle:
        for number, line in enumerate(handle, start=1):
            if not line.strip():
                continue
            try:
                value = json.loads(line)
            except json.JSONDecodeError as error:
                raise CommandError(f"{path}, line {number}: not JSON ({error.msg})")
            if not isinstance(value, dict):
                raise CommandError(f"{path}, line {number}: expected a JSON object")
            lines.append(value)
            if len(lines) > MAX_LINES:
                raise CommandError(f"{path}: more than {MAX_LINES} lines")
    if not lines:
        raise CommandError(f"{path} holds no triple")
    return lines
