"""Create (or update) a curator account: `create_curator --username U --password P`.

Idempotent: running it again keeps one user, sets the given password and keeps it in the
`curator` group."""

from __future__ import annotations

from typing import Any

from common.accounts import curator_save
from common.management.base import LepusCommand
from common.management.declared import Arg


class Command(LepusCommand):
    """Create a curator (a user in the 'curator' group); idempotent."""

    arguments = (
        Arg("--username", required=True),
        Arg("--password", required=True),
        Arg("--email", default=""),
    )

    def handle(self, *args: Any, **options: Any) -> None:
        user, created = curator_save(
            username=options["username"], password=options["password"], email=options["email"]
        )
        self.emit(
            {"username": user.get_username(), "created": created},
            human=f"{'Created' if created else 'Updated'} curator {user.get_username()}.",
        )
