"""Prepare a Label Studio instance for the load benchmark (run with Label Studio's own Python).

    bench/.peers/ls-venv/bin/python bench/peers/label_studio_setup.py --annotators 200

It uses the same environment as the server it prepares (LABEL_STUDIO_BASE_DATA_DIR, DJANGO_DB and
POSTGRE_* for PostgreSQL, ...): applies the migrations, creates an organization with legacy API tokens
enabled (the `Authorization: Token ...` scheme of its public API docs), one administrator and N
annotator users, each with an API token, and prints one JSON object:

    {"admin_token": "...", "annotator_tokens": ["...", ...], "annotator_ids": [...]}

Projects and tasks are then created through the public HTTP API by `bench/load_workers.py`. Users are
created here because Label Studio Community has no public API that creates users with tokens (it
invites people through a signup link).
"""

from __future__ import annotations

import argparse
import json
import os
import pathlib
import sys


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--annotators", type=int, default=20)
    args = parser.parse_args()

    import label_studio

    label_studio_path = str(pathlib.Path(label_studio.__file__).parent)
    sys.path.insert(0, label_studio_path)
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "core.settings.label_studio")
    import django

    django.setup()
    from django.core.management import call_command

    call_command("migrate", "--no-color", verbosity=0)

    from organizations.models import Organization
    from rest_framework.authtoken.models import Token
    from users.models import User

    def user_with_token(email: str, *, admin: bool) -> tuple[User, str]:
        user = User.objects.filter(email=email).first()
        if user is None:
            user = User.objects.create_user(email=email, password="loadbench-" + email)
        if admin and not user.is_superuser:
            user.is_staff = True
            user.is_superuser = True
            user.save()
        token, _ = Token.objects.get_or_create(user=user)
        return user, token.key

    admin, admin_token = user_with_token("admin@loadbench.local", admin=True)
    organization = Organization.objects.first()
    if organization is None:
        organization = Organization.create_organization(
            created_by=admin, title="loadbench", legacy_api_tokens_enabled=True
        )
    organization.jwt.legacy_api_tokens_enabled = True
    organization.jwt.save()
    admin.active_organization = organization
    admin.save(update_fields=["active_organization"])

    tokens: list[str] = []
    ids: list[int] = []
    for index in range(args.annotators):
        user, key = user_with_token(f"annotator{index:04d}@loadbench.local", admin=False)
        if not organization.has_user(user):
            organization.add_user(user)
        if user.active_organization_id != organization.id:
            user.active_organization = organization
            user.save(update_fields=["active_organization"])
        tokens.append(key)
        ids.append(user.id)
    sys.stdout.write(
        json.dumps(
            {
                "admin_token": admin_token,
                "annotator_tokens": tokens,
                "annotator_ids": ids,
                "organization_id": organization.id,
            }
        )
        + "\n"
    )


if __name__ == "__main__":
    main()
