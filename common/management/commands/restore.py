"""Restore a backup written by `manage.py backup` into an empty database and an empty storage
(docs/deployment.md, "Backup and restore").

    python manage.py restore /srv/backups/2026-11-27 --json
        ->  {"database": {"rows": ...}, "objects": {"count": ...}, "migrations_pending": [...]}

Every file is checked against the manifest before anything is written; a non-empty database or
storage, or a file that does not match, is refused (exit status 1, the file named).
"""

from __future__ import annotations

from typing import Any

from common.backup import BackupError, restore_run
from common.management.arguments import DRY_RUN, command_errors
from common.management.base import LepusCommand
from common.management.commands.backup import BACKUP_FOLDER
from common.management.progress import phase_bars


class Command(LepusCommand):
    """Restore a backup folder into the configured database and storage, both empty; every file's
    sha256 is checked first."""

    arguments = (
        BACKUP_FOLDER.but(help="A folder written by `backup`."),
        DRY_RUN.but(help="Only check the files and that the database and storage are empty."),
    )

    def handle(self, *args: Any, **options: Any) -> None:
        with phase_bars(self) as progress, command_errors(BackupError):
            result = restore_run(
                directory=options["directory"],
                dry_run=bool(options["dry_run"]),
                progress=progress,
            )
        database, objects = result["database"], result["objects"]
        if result["dry_run"]:
            human = (
                f"dry run: {result['verified_files']} files match the manifest; database "
                f"{result['database_name']!r} and storage {result['storage']} are empty; "
                "nothing was restored"
            )
        else:
            pending = result["migrations_pending"]
            human = (
                f"restored {database['rows']} rows in {database['tables']} tables and "
                f"{objects['count']} objects into {result['database_name']!r} and "
                f"{result['storage']}"
                + (
                    f"; this code has {len(pending)} newer migrations: run `manage.py migrate`"
                    if pending
                    else ""
                )
            )
        self.emit(result, human=human)
