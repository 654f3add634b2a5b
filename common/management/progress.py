"""One progress bar per phase of a long command, fed by a `(phase, done, total)` callback."""

from __future__ import annotations

from types import TracebackType
from typing import Any

from tqdm import tqdm

from common.management.base import LepusCommand


class PhaseBars:
    def __init__(self, command: LepusCommand) -> None:
        self.command = command
        self.bars: dict[str, tqdm[Any]] = {}

    def update(self, phase: str, done: int, total: int) -> None:
        bar = self.bars.get(phase)
        if bar is None:
            bar = self.bars[phase] = self.command.progress_bar(total=total, description=phase)
        bar.update(done - bar.n)  # tqdm redraws at most every `mininterval` seconds

    def __enter__(self) -> PhaseBars:
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        for bar in self.bars.values():
            bar.close()
