"""`make demo`'s terminal: the errors the web server and the Celery worker log reach it
(scripts/demo.sh tees their output through scripts/errors_to_terminal.awk), the rest stays in
var/demo/logs/."""

from __future__ import annotations

import re
import subprocess

import pytest

from tests.support.plain import REPO_ROOT


def test_the_demo_terminal_shows_only_error_records_of_the_logs():
    log = "\n".join(
        [
            "2026-11-27 16:20:01,123 INFO django.x starting",
            "  a continuation of the info record",
            "2026-11-27 16:20:02,123 ERROR django.request Internal Server Error: /dashboard/",
            "Traceback (most recent call last):",
            "OperationalError: no such function: ANY",
            '[27/Nov/2026 16:20:02] "GET /dashboard/ HTTP/1.1" 500 145',
            '[27/Nov/2026 16:20:03] "GET /healthz HTTP/1.1" 200 2',
            "[2026-11-27 16:20:04,000: ERROR/ForkPoolWorker-1] Task x raised",
            "ValueError: boom",
            "[2026-11-27 16:20:05,000: INFO/MainProcess] Task y succeeded",
            "",
        ]
    )
    script = REPO_ROOT / "scripts" / "errors_to_terminal.awk"
    result = subprocess.run(
        ["awk", "-v", "prefix=web", "-f", str(script)],
        input=log,
        capture_output=True,
        text=True,
        check=True,
    )
    assert result.stdout.splitlines() == [
        "web: 2026-11-27 16:20:02,123 ERROR django.request Internal Server Error: /dashboard/",
        "web: Traceback (most recent call last):",
        "web: OperationalError: no such function: ANY",
        'web: [27/Nov/2026 16:20:02] "GET /dashboard/ HTTP/1.1" 500 145',
        "web: [2026-11-27 16:20:04,000: ERROR/ForkPoolWorker-1] Task x raised",
        "web: ValueError: boom",
    ]


@pytest.mark.django_db
def test_every_page_the_demo_banner_names_opens_for_the_curator(curator_client):
    """The banner once advertised the Django admin, which the curator (no staff flag) cannot use:
    each dashboard URL the banner prints must answer the curator with 200."""
    script = (REPO_ROOT / "scripts" / "demo.sh").read_text()
    banner = script[script.index("Lepus demo is running.") : script.index("Press Ctrl-C to stop.")]
    paths = re.findall(r"http://127\.0\.0\.1:\$PORT(/[^\s]*)", banner)
    assert "/dashboard/" in paths and "/admin/" not in paths, paths
    for path in paths:
        assert curator_client.get(path).status_code == 200, path
