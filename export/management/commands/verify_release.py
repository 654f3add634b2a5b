"""Re-hash a published release's files against the database and its manifest.

    python manage.py verify_release ID --json   ->   {"ok": true|false, "mismatches": [...]}

Exit status 1 when something does not match.
"""

from __future__ import annotations

from typing import Any

from common.management.arguments import found
from common.management.base import LepusCommand
from common.management.declared import Arg
from export.models import Release
from export.services import release_verify


class Command(LepusCommand):
    """Verify a release's files against the sha256 sums of its manifest."""

    arguments = (Arg("release_id", type=int),)

    def handle(self, *args: Any, **options: Any) -> None:
        release = found(
            Release.objects.filter(pk=options["release_id"]).first(),
            f"no release {options['release_id']}",
        )
        result = release_verify(release=release)
        lines = [f"release {release.pk}: {'ok' if result['ok'] else 'MISMATCH'}"]
        lines += [f"  {item['path'] or '-'}: {item['problem']}" for item in result["mismatches"]]
        self.emit(result, human="\n".join(lines))
        if not result["ok"]:
            raise SystemExit(1)
