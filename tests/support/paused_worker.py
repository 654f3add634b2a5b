"""A `celery -A config worker` that pauses at named points of its jobs, so that a test can kill
it mid-job: `python -m tests.support.paused_worker <celery worker arguments>`, the pauses in the
environment as JSON, ``LEPUS_TEST_PAUSES='{"release.batch": 0.5}'`` (seconds).

The pauses are the tests' own: the shipped code has no sleep for them. Each one wraps, in this
process only, the call after which the job should stop for a while:

- ``video.upload``: after a clip's video is uploaded and before its poster (`common.storage`);
- ``release.batch``: after each batch of a release's split lines is written (`export.reads`);
- ``training.step``: after each Phase 2 step's progress (`training_bridge.services.reporting`).
"""

from __future__ import annotations

import json
import os
import sys
import time
from collections.abc import Callable
from typing import Any

PAUSES_VARIABLE = "LEPUS_TEST_PAUSES"


def _pause_video_upload(seconds: float) -> None:
    from common import storage

    put_file = storage.put_file

    def paused_put_file(key: str, local_path: Any) -> str:
        result = put_file(key, local_path)
        if key.endswith("/video.mp4"):
            time.sleep(seconds)
        return result

    storage.put_file = paused_put_file  # type: ignore[assignment]


class _PausedCursor:
    """A split's line cursor that pauses after each batch it handed out (the writer writes a
    batch between two fetches)."""

    def __init__(self, cursor: Any, seconds: float) -> None:
        self.cursor = cursor
        self.seconds = seconds
        self.handed_out = False

    def fetchmany(self, size: int) -> list[tuple[bytes, bytes]]:
        if self.handed_out:
            time.sleep(self.seconds)
        rows = self.cursor.fetchmany(size)
        self.handed_out = bool(rows)
        return rows

    def close(self) -> None:
        self.cursor.close()


def _pause_release_batch(seconds: float) -> None:
    from export.reads import ReleaseReads

    split_lines = ReleaseReads.split_lines

    def paused_split_lines(self: ReleaseReads, **kwargs: Any) -> Any:
        return _PausedCursor(split_lines(self, **kwargs), seconds)

    ReleaseReads.split_lines = paused_split_lines  # type: ignore[method-assign]


def _pause_training_step(seconds: float) -> None:
    from training_bridge.services.reporting import RunReporter

    progress = RunReporter.progress

    def paused_progress(self: RunReporter, fraction: float, message: str) -> None:
        progress(self, fraction, message)
        if message.startswith("phase 2: step"):
            time.sleep(seconds)

    RunReporter.progress = paused_progress  # type: ignore[method-assign]


INSTALLERS: dict[str, Callable[[float], None]] = {
    "video.upload": _pause_video_upload,
    "release.batch": _pause_release_batch,
    "training.step": _pause_training_step,
}


def install_pauses(pauses: dict[str, float]) -> None:
    unknown = sorted(set(pauses) - set(INSTALLERS))
    if unknown:
        raise ValueError(f"unknown pause points {unknown}; known: {sorted(INSTALLERS)}")
    for point, seconds in pauses.items():
        if seconds > 0:
            INSTALLERS[point](float(seconds))


def main() -> None:
    import django

    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.test_settings")
    django.setup()
    install_pauses(json.loads(os.environ.get(PAUSES_VARIABLE) or "{}"))
    from celery.__main__ import main as celery_main

    sys.argv = ["celery", *sys.argv[1:]]
    celery_main()


if __name__ == "__main__":
    main()
