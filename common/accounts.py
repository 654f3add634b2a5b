"""Curator accounts: created or updated in one place (the `create_curator` command, the demo)."""

from __future__ import annotations

from django.contrib.auth import get_user_model
from django.contrib.auth.models import AbstractBaseUser, Group
from django.db import transaction

from common.permissions import CURATOR_GROUP


def curator_save(*, username: str, password: str, email: str = "") -> tuple[AbstractBaseUser, bool]:
    """Create the user `username` or update it (idempotent): the given password, active, in the
    `curator` group; the email when one is given. Returns (user, created)."""
    user_model = get_user_model()
    with transaction.atomic():
        user, created = user_model.objects.get_or_create(
            username=username, defaults={"email": email}
        )
        user.set_password(password)
        user.is_active = True
        if email:
            user.email = email
        user.save()
        group, _ = Group.objects.get_or_create(name=CURATOR_GROUP)
        user.groups.add(group)
    return user, created
