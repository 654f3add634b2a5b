"""Test helpers that import no Django: the repository root and a free local port.

The Django-free tests (tests/rigel/, tests/metrics/) import these from here; tests.support.processes
re-exports them for the rest.
"""

from __future__ import annotations

import socket
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[2]


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])
