"""Which code is running: named in release manifests and backups."""

from __future__ import annotations

import functools
import subprocess
import tomllib
from pathlib import Path

from django.conf import settings


@functools.cache
def code_version() -> str:
    """`LEPUS_CODE_VERSION`, else `git describe --tags --always --dirty`, else the package version.

    Cached per process: it names the code that wrote the files and never includes a time.
    """
    configured = settings.LEPUS_CODE_VERSION.strip()
    if configured:
        return configured
    try:
        described = subprocess.run(
            ["git", "describe", "--tags", "--always", "--dirty"],
            cwd=settings.BASE_DIR,
            capture_output=True,
            text=True,
            timeout=10,
            check=False,
        )
        if described.returncode == 0 and described.stdout.strip():
            return f"git {described.stdout.strip()}"
    except (OSError, subprocess.SubprocessError):
        pass
    with open(Path(settings.BASE_DIR) / "pyproject.toml", "rb") as handle:
        project = tomllib.load(handle)["project"]
    return f"{project['name']} {project['version']}"
