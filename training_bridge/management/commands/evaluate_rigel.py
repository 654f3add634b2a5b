"""`manage.py evaluate_rigel`: finished training runs scored on an imported benchmark campaign under
the paper's protocols, beside the standard metrics (see `services.rigel_benchmark`).

    python manage.py evaluate_rigel --run 7 --campaign vatex-eval \
        --protocol reference-free,1-ref,all-refs --json
    python manage.py evaluate_rigel --runs 7,8,9,10,11 --campaign vatex-eval --protocol 1-ref
    python manage.py evaluate_rigel --runs FREE,BASED --campaign anet-foil --protocol foil \
        --foil-file activitynet_foil.jsonl     # ActivityNet-FOIL (convert_activitynet_foil)
    python manage.py evaluate_rigel --run 7 --campaign vatex-eval --protocol noun-swap \
        [--foil-seed 0]                        # our own benchmark: foils generated from references

Values are x100 (correlations) and % (FOIL accuracy). It fails, naming how many, when a benchmark
clip is in a run's train or validation split. A run is scored only under the protocols of the
setting it was trained in (`train --reference-free` for the reference-free row); a protocol that no
given run was trained for fails the command unless --allow-protocol-mismatch, which scores it anyway
and labels it (`protocol_mismatch` in --json, [MISMATCH] in the table). Without --protocol: the
protocols of the runs' own settings.

    python manage.py evaluate_rigel --runs FREE,BASED --campaign vatex-eval \
        --protocol reference-free,1-ref,all-refs --json     # Table 2: each row by its own model

Image benchmarks (Table 1's image columns; Tables 3 and 5 for ablation runs) are read from a
generic image JSONL and its images folder, without importing them (docs/metrics.md, "Image
benchmarks", says how to make the file from the published judgments):

    python manage.py evaluate_rigel --runs FREE,BASED --image-benchmark expert.jsonl \
        --images Flicker8k_Dataset --benchmark flickr8k-expert --json
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from django.core.management.base import CommandError

from annotation.management.campaign_command import campaign_by_slug
from common.management.arguments import SCALE, command_errors
from common.management.base import LepusCommand
from common.management.declared import Arg, OneOf, flag
from training_bridge.management.options import METRIC_SETTING, METRICS, PRESET
from training_bridge.metrics.plugins import METRIC_NAMES
from training_bridge.rigel.config import preset_name
from training_bridge.rigel.image_benchmarks import IMAGE_BENCHMARKS
from training_bridge.services.rigel_benchmark import (
    CORRELATIONS,
    PROTOCOL_CHOICES,
    RigelEvaluationError,
    check_foil_inputs,
    parse_protocols,
    result_text,
    rigel_benchmark_evaluate,
    runs_for,
)
from training_bridge.services.rigel_image_benchmark import (
    image_result_text,
    rigel_image_benchmark_evaluate,
)

MAX_IMAGE_BENCHMARK_BYTES = 512 * 1024 * 1024


def _ids(value: str) -> list[int]:
    try:
        return [int(part) for part in value.split(",") if part.strip()]
    except ValueError:
        raise CommandError(f"--runs expects ids separated by commas, not {value!r}")


def check_preset(runs: list[Any], preset: str) -> None:
    """Refuse runs trained with another visual-input preset than `preset` (a run scores with the
    frames and resolution it was trained on; scoring it at others would be another model)."""
    from training_bridge.services.runs import training_run_config

    other = [
        f"run {run.pk} ({preset_name(training_run_config(run=run))})"
        for run in runs
        if preset_name(training_run_config(run=run)) != preset
    ]
    if other:
        raise CommandError(
            f"--preset {preset}: {', '.join(other)} trained with another preset; train one with "
            f"`manage.py train --preset {preset}`"
        )


def _settings(pairs: list[str]) -> dict[str, str]:
    values = {}
    for pair in pairs:
        key, separator, value = pair.partition("=")
        if not separator or not key:
            raise CommandError(f"--set expects KEY=VALUE, got {pair!r}")
        values[key.strip()] = value
    return values


class Command(LepusCommand):
    """Score finished Rigel runs on a benchmark campaign (reference-free, 1-ref, all-refs, foil)
    and correlate them with the human scores, beside the standard metrics."""

    arguments = (
        OneOf(
            (
                Arg("--run", type=int, help="A succeeded training run."),
                Arg("--runs", help="Several runs in one table, e.g. 7,8,9 (ablations)."),
            ),
            required=True,
        ),
        OneOf(
            (
                Arg("--campaign", help="Slug of the benchmark campaign."),
                Arg(
                    "--image-benchmark",
                    help="A generic image JSONL (image, references, candidates, judgments) to "
                    "score instead of a campaign; with --images and --benchmark.",
                ),
            ),
            required=True,
        ),
        Arg("--images", help="The folder of the image benchmark's pictures."),
        Arg(
            "--benchmark",
            choices=sorted(IMAGE_BENCHMARKS),
            help="Which image benchmark the file is (decides the protocol and the paper's rows).",
        ),
        SCALE.but(help="The judgments' scale for lines without a 'scale' field."),
        Arg(
            "--protocol",
            action="append",
            help=f"{', '.join(PROTOCOL_CHOICES)}; repeat or separate by commas "
            "(default: the protocols of the runs' own settings: reference-free for a "
            "reference-free run, 1-ref,all-refs for a reference-based one).",
        ),
        PRESET.but(
            help="Check that every run was trained with this visual-input preset (default or "
            "paper-budget; a run scores with the frames and resolution it was trained on)."
        ),
        flag(
            "--allow-protocol-mismatch",
            help="Score every run under every protocol, also those of the setting it was not "
            "trained in; the output labels each such row (protocol_mismatch in --json).",
        ),
        Arg(
            "--correlation",
            choices=CORRELATIONS,
            default="emscore",
            help="emscore: per rater slot, averaged (evaluate_metrics --protocol emscore; the "
            "default); default: against each candidate's aggregate score.",
        ),
        METRICS.but(
            help=f"Metrics beside Rigel (known: {','.join(METRIC_NAMES)}); a learned one without "
            "weights is listed with the reason."
        ),
        METRIC_SETTING.but(
            default=[],
            help="A metric plug-in setting, e.g. --set clip_model=/models/clip (as evaluate_metrics).",
        ),
        Arg("--foil-seed", type=int, default=0, help="Seed of the noun-swap protocol's swaps."),
        Arg(
            "--foil-file",
            help="The foil protocol's file: the paragraphs convert_activitynet_foil writes, or "
            "JSON Lines of your own pairs (clip, caption, foil[, references]).",
        ),
    )

    def handle(self, *args: Any, **options: Any) -> None:
        if options["image_benchmark"]:
            self.handle_images(options)
            return
        campaign = campaign_by_slug(options["campaign"])
        metrics = [name.strip() for name in options["metrics"].split(",") if name.strip()]
        unknown = [name for name in metrics if name not in METRIC_NAMES]
        if unknown:
            raise CommandError(f"unknown metric(s) {', '.join(unknown)}")
        foil_lines = None
        if options["foil_file"]:
            path = Path(options["foil_file"])
            if not path.is_file():
                raise CommandError(f"no FOIL file at {path}")
            foil_lines = path.read_text(encoding="utf-8").splitlines()
        with command_errors(RigelEvaluationError):
            protocols = parse_protocols(options["protocol"]) if options["protocol"] else []
            check_foil_inputs(
                protocols, has_file=foil_lines is not None, error=RigelEvaluationError
            )
            with self._scoring(options) as (runs, progress):
                result = rigel_benchmark_evaluate(
                    runs=runs,
                    campaign=campaign,
                    protocols=protocols,
                    correlation=options["correlation"],
                    metrics=metrics,
                    settings=_settings(options["set"]),
                    foil_seed=options["foil_seed"],
                    foil_lines=foil_lines,
                    progress=progress,
                    allow_protocol_mismatch=options["allow_protocol_mismatch"],
                )
        self.emit(result, human=result_text(result))

    @contextlib.contextmanager
    def _scoring(
        self, options: dict[str, Any]
    ) -> Iterator[tuple[list[Any], Callable[[float, str], None]]]:
        """The runs to score (checked against --preset) and a progress bar on stderr, closed
        afterwards."""
        runs = runs_for([options["run"]] if options["run"] else _ids(options["runs"]))
        if options["preset"]:
            check_preset(runs, options["preset"])
        bar = self.progress_bar(total=1000, description="evaluate_rigel")

        def progress(fraction: float, message: str) -> None:
            bar.n = int(1000 * fraction)
            bar.set_postfix_str(message[:60])
            bar.refresh()

        try:
            yield runs, progress
        finally:
            bar.close()

    def handle_images(self, options: dict[str, Any]) -> None:
        path = Path(options["image_benchmark"])
        if not path.is_file():
            raise CommandError(f"no image benchmark file at {path}")
        if not options["images"] or not options["benchmark"]:
            raise CommandError("--image-benchmark needs --images and --benchmark")
        if options["foil_file"]:
            raise CommandError("--foil-file scores a campaign, not an image benchmark")
        if path.stat().st_size > MAX_IMAGE_BENCHMARK_BYTES:
            raise CommandError(f"{path} is larger than {MAX_IMAGE_BENCHMARK_BYTES} bytes")
        with command_errors(RigelEvaluationError), self._scoring(options) as (runs, progress):
            result = rigel_image_benchmark_evaluate(
                runs=runs,
                benchmark=options["benchmark"],
                lines=path.read_text(encoding="utf-8").splitlines(),
                images=Path(options["images"]),
                protocols=options["protocol"],
                scale=options["scale"],
                file_name=path.name,
                allow_protocol_mismatch=options["allow_protocol_mismatch"],
                progress=progress,
            )
        self.emit(result, human=image_result_text(result))
