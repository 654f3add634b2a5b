"""The --metrics option of the two evaluation commands: the same name, default and list of known
metrics; only its help says what the table beside it is."""

from __future__ import annotations

from django.core.management.base import CommandParser

from training_bridge.metrics.plugins import TABLE_METRICS


def add_metrics_option(parser: CommandParser, *, help: str) -> None:
    parser.add_argument("--metrics", default=",".join(TABLE_METRICS), help=help)
