"""Back up the database and every stored object into a new folder (docs/deployment.md, "Backup and
restore").

    python manage.py backup /srv/backups/2026-11-27 --json
        ->  {"directory": ..., "database": {"rows": ..., "sha256": ...}, "objects": {"count": ...}}
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from common.backup import BackupError, backup_create
from common.management.arguments import command_errors
from common.management.base import LepusCommand
from common.management.declared import Arg
from common.management.progress import phase_bars

BACKUP_FOLDER = Arg("directory", type=Path)  # also restore's


class Command(LepusCommand):
    """Write a backup: a pg_dump of the whole database, a copy of every stored object and a
    manifest of their sha256 sums, into DIRECTORY (new or empty)."""

    arguments = (BACKUP_FOLDER.but(help="A new or empty folder."),)

    def handle(self, *args: Any, **options: Any) -> None:
        with phase_bars(self) as progress, command_errors(BackupError):
            result = backup_create(directory=options["directory"], progress=progress)
        database, objects = result["database"], result["objects"]
        self.emit(
            result,
            human=(
                f"backup written to {result['directory']}: {database['rows']} rows in "
                f"{database['tables']} tables ({database['bytes']} bytes dumped by pg_dump "
                f"{database['pg_dump']}), {objects['count']} objects ({objects['bytes']} bytes)"
            ),
        )
