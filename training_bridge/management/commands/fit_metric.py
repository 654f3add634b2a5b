"""`manage.py fit_metric`: fit a caption metric on a release's training split and evaluate it on
its test split — Redemption Score's fusion weights by its grid search, any other metric's
calibration onto the human scale — refusing leakage, and store the result
(`training_bridge.models.MetricEvaluation`).

    python manage.py fit_metric --release 3 --metric redemption --json \
        --set clip_model=/models/clip-vit-large-patch14 --set dino_model=/models/dino-vitb8 \
        --set gte_model=/models/gte-large --set t2i_model=/models/sd3-medium
    -> {"id": 1, "metric": "redemption", "fitted": {"alpha": .., ...}, "result": {"test": ..}}
"""

from __future__ import annotations

from typing import Any

from common.management.arguments import command_errors
from common.management.base import LepusCommand
from common.management.declared import Arg
from training_bridge.management.commands.evaluate_metrics import (
    _reference_count,
    _settings,
)
from training_bridge.management.options import METRIC_SETTING, REFS, RELEASE
from training_bridge.metrics.benchmark import CORRELATION_KEYS
from training_bridge.metrics.plugins import METRIC_NAMES
from training_bridge.services.metric_benchmark import MetricBenchmarkError
from training_bridge.services.metric_fitting import metric_evaluation_fit


class Command(LepusCommand):
    """Fit a caption metric (Redemption Score's fusion weights, or any metric's calibration) on a
    release's training split, evaluate it on the test split, and store the result."""

    arguments = (
        RELEASE.but(required=True, help="Release id."),
        Arg("--metric", required=True, choices=METRIC_NAMES),
        Arg("--train-split", default="train", help="Split to fit on (train)."),
        Arg("--test-split", default="test", help="Split to evaluate on (test)."),
        REFS.but(help="References per candidate, or 'all'."),
        METRIC_SETTING.but(
            dest="settings", help="A metric setting (repeatable), as for evaluate_metrics."
        ),
    )

    def handle(self, *args: Any, **options: Any) -> None:
        with command_errors(MetricBenchmarkError):
            evaluation = metric_evaluation_fit(
                release_id=options["release"],
                metric=options["metric"],
                settings=_settings(options["settings"]),
                train_split=options["train_split"],
                test_split=options["test_split"],
                reference_count=_reference_count(str(options["refs"])),
                progress=self.note,
            )
        payload = {
            "id": evaluation.pk,
            "release": evaluation.release_id,
            "metric": evaluation.metric,
            "train_split": evaluation.train_split,
            "test_split": evaluation.test_split,
            "fitted": evaluation.fitted,
            "result": evaluation.result,
        }
        test = evaluation.result["test"]
        human = "\n".join(
            [
                f"{evaluation.metric} fitted on {evaluation.train_split}: {evaluation.fitted}",
                f"on {evaluation.test_split}: "
                + ", ".join(
                    f"{key} {'n/a' if test[key] is None else f'{test[key]:.2f}'}"
                    for key in CORRELATION_KEYS
                ),
                f"stored as metric evaluation {evaluation.pk}",
            ]
        )
        self.emit(payload, human=human)
