from __future__ import annotations

from typing import Any

from annotation.selectors import platform_stats
from common.management.base import LepusCommand


class Command(LepusCommand):
    """Row counts of the core tables: clips, references, candidates, judgments, campaigns,
    systems, import batches, workers, assignments, clips by status, ..."""

    def handle(self, *args: Any, **options: Any) -> None:
        stats = platform_stats()
        lines = []
        for key, value in stats.items():
            if isinstance(value, dict):
                inner = ", ".join(f"{name} {count}" for name, count in value.items())
                lines.append(f"{key:<22} {inner}")
            else:
                lines.append(f"{key:<22} {value}")
        self.emit(stats, human="\n".join(lines))
