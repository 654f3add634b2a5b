"""The option rows several training and metric commands declare: the same name, type and default
in one place; each command words the help for what it does with it (`row.but(help=...)`)."""

from __future__ import annotations

from common.management.declared import Arg
from training_bridge.metrics.plugins import TABLE_METRICS
from training_bridge.rigel.config import PRESETS

METRICS = Arg("--metrics", default=",".join(TABLE_METRICS))  # evaluate_metrics, evaluate_rigel
METRIC_SETTING = Arg("--set", action="append", metavar="KEY=VALUE")  # + fit_metric
REFS = Arg("--refs", default="all")  # evaluate_metrics, fit_metric
RELEASE = Arg("--release", type=int)  # + train
PRESET = Arg("--preset", choices=sorted(PRESETS), default=None)  # train, score, evaluate_rigel
TRAINING_RUN = Arg("--run", type=int, required=True)  # score, resume_training
RUN_TIMEOUT = Arg("--timeout", type=float, default=7 * 24 * 3600.0)  # train, resume_training
