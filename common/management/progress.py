"""One progress bar per phase of a long command, fed by a `(phase, done, total)` callback."""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from typing import Any

from tqdm import tqdm

from common.management.base import LepusCommand


@contextlib.contextmanager
def phase_bars(command: LepusCommand) -> Iterator[Callable[[str, int, int], None]]:
    """The `progress(phase, done, total)` callback; a phase's bar opens on its first report and
    every bar closes when the block ends."""
    bars: dict[str, tqdm[Any]] = {}

    def update(phase: str, done: int, total: int) -> None:
        bar = bars.get(phase)
        if bar is None:
            bar = bars[phase] = command.progress_bar(total=total, description=phase)
        bar.update(done - bar.n)  # tqdm redraws at most every `mininterval` seconds

    try:
        yield update
    finally:
        for bar in bars.values():
            bar.close()
