"""What every page carries: the icon browsers ask for, and an Admin link only for those it admits."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
from django.contrib.staticfiles import finders

REPO = Path(__file__).resolve().parents[2]


def test_favicon_redirects_to_a_static_icon_that_exists(client) -> None:  # type: ignore[no-untyped-def]
    response = client.get("/favicon.ico")
    assert response.status_code == 302
    assert response["Location"].endswith("favicon.ico")
    assert response["Cache-Control"] == "public, max-age=86400"
    icon = finders.find("favicon.ico")
    assert icon is not None
    assert Path(icon).read_bytes()[:4] == b"\x00\x00\x01\x00"  # the ICO file signature


@pytest.mark.django_db
def test_admin_link_only_for_staff(client, curator, admin_user) -> None:  # type: ignore[no-untyped-def]
    client.force_login(curator)
    page = client.get("/dashboard/").content.decode()
    assert 'href="/dashboard/releases/"' in page
    assert 'href="/admin/"' not in page

    client.force_login(admin_user)
    page = client.get("/dashboard/").content.decode()
    assert 'href="/admin/"' in page


def test_preflight_names_each_missing_prerequisite_before_installing(tmp_path: Path) -> None:
    """No ffmpeg on the PATH and a taken port: both are reported with their fix, exit 1."""
    import socket

    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    python = subprocess.run(
        ["bash", "-c", "command -v python3"], capture_output=True, text=True, check=True
    ).stdout.strip()
    (bin_dir / "python3").symlink_to(python)
    for tool in ("bash", "cut", "head"):
        found = subprocess.run(
            ["bash", "-c", f"command -v {tool}"], capture_output=True, text=True, check=True
        ).stdout.strip()
        (bin_dir / tool).symlink_to(found)
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        result = subprocess.run(
            [str(bin_dir / "bash"), str(REPO / "scripts" / "preflight.sh")],
            env={"PATH": str(bin_dir), "LEPUS_DEMO_PORT": str(port)},
            capture_output=True,
            text=True,
            timeout=60,
        )
    assert result.returncode == 1
    assert "ffmpeg is needed for the demo videos: install ffmpeg" in result.stderr
    assert "ffprobe is needed" in result.stderr
    assert f"port {port} on 127.0.0.1 is taken" in result.stderr


def test_preflight_passes_on_this_machine() -> None:
    with __import__("socket").socket() as probe:
        probe.bind(("127.0.0.1", 0))
        free_port = probe.getsockname()[1]
    result = subprocess.run(
        ["bash", str(REPO / "scripts" / "preflight.sh")],
        env={"PATH": "/usr/local/bin:/usr/bin:/bin", "LEPUS_DEMO_PORT": str(free_port)},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 0, result.stderr
    assert f"port {free_port} free" in result.stdout
