"""The release commands' contracts: build_release (inline, queued, unknown campaign)."""

from __future__ import annotations

import io
import json

import pytest
from django.core.management import call_command

from export.models import Release
from tests.export.builders import build_campaign


def test_build_release_inline_prints_the_contract(db, settings):
    build_campaign(slug="cli", clips=8, workers=5)
    out = io.StringIO()
    call_command(
        "build_release",
        "--campaign",
        "cli",
        "--seed",
        "4",
        "--name",
        "cli v1",
        "--inline",
        "--json",
        stdout=out,
    )
    payload = json.loads(out.getvalue())
    release = Release.objects.get()
    assert payload == {
        "release": release.pk,
        "status": "succeeded",
        "files": release.files,
        "location": str(settings.MEDIA_ROOT / "releases" / str(release.pk)),
    }
    assert release.name == "cli v1"
    queued = io.StringIO()
    call_command("build_release", "--campaign", "cli", "--json", stdout=queued)
    assert json.loads(queued.getvalue())["status"] == "queued"
    with pytest.raises(Exception, match="unknown campaign"):
        call_command("build_release", "--campaign", "nope", "--json", stdout=io.StringIO())
