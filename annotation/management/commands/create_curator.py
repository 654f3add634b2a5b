"""Create (or update) a curator account: `create_curator --username U --password P`.

Idempotent: running it again keeps one user, sets the given password and keeps it in the
`curator` group."""

from __future__ import annotations

from typing import Any

from django.contrib.auth import get_user_model
from django.contrib.auth.models import Group
from django.core.management.base import CommandParser
from django.db import transaction

from common.management.base import LepusCommand
from common.permissions import CURATOR_GROUP


class Command(LepusCommand):
    help = "Create a curator (a user in the 'curator' group); idempotent."

    def add_arguments(self, parser: CommandParser) -> None:
        super().add_arguments(parser)
        parser.add_argument("--username", required=True)
        parser.add_argument("--password", required=True)
        parser.add_argument("--email", default="")

    def handle(self, *args: Any, **options: Any) -> None:
        user_model = get_user_model()
        with transaction.atomic():
            user, created = user_model.objects.get_or_create(
                username=options["username"], defaults={"email": options["email"]}
            )
            user.set_password(options["password"])
            user.is_active = True
            if options["email"]:
                user.email = options["email"]
            user.save()
            group, _ = Group.objects.get_or_create(name=CURATOR_GROUP)
            user.groups.add(group)
        self.emit(
            {"username": user.username, "created": created},
            human=f"{'Created' if created else 'Updated'} curator {user.username}.",
        )
