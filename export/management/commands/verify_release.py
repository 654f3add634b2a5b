"""Re-hash a published release's files against the database and its manifest.

    python manage.py verify_release ID --json   ->   {"ok": true|false, "mismatches": [...]}

Exit status 1 when something does not match.
"""

from __future__ import annotations

from typing import Any

from django.core.management.base import CommandError, CommandParser

from common.management.base import LepusCommand
from export.models import Release
from export.services import release_verify


class Command(LepusCommand):
    help = "Verify a release's files against the sha256 sums of its manifest."

    def add_arguments(self, parser: CommandParser) -> None:
        super().add_arguments(parser)
        parser.add_argument("release_id", type=int)

    def handle(self, *args: Any, **options: Any) -> None:
        try:
            release = Release.objects.get(pk=options["release_id"])
        except Release.DoesNotExist:
            raise CommandError(f"no release {options['release_id']}")
        result = release_verify(release=release)
        lines = [f"release {release.pk}: {'ok' if result['ok'] else 'MISMATCH'}"]
        lines += [f"  {item['path'] or '-'}: {item['problem']}" for item in result["mismatches"]]
        self.emit(result, human="\n".join(lines))
        if not result["ok"]:
            raise SystemExit(1)
