"""No DNS from the test process: `socket.getaddrinfo` answers IP literals, localhost and this
machine's own name, and fails at once for any other name (as with no network) instead of sending
a query off the machine. Installed for the whole session by tests/conftest.py; the processes the
tests start get the same for webhooks through `LEPUS_WEBHOOK_RESOLVE=offline`."""

from __future__ import annotations

import ipaddress
import socket
from collections.abc import Callable
from typing import Any

LOCAL_NAMES = {"localhost", "localhost.localdomain", "ip6-localhost", "ip6-loopback"}


def _is_local(host: Any) -> bool:
    if host is None:
        return True
    name = host.decode() if isinstance(host, bytes) else str(host)
    try:
        ipaddress.ip_address(name.split("%")[0])
        return True
    except ValueError:
        pass
    name = name.lower().rstrip(".")
    return name in LOCAL_NAMES or name.endswith(".localhost") or name == socket.gethostname()


def guarded(original: Callable[..., Any]) -> Callable[..., Any]:
    def getaddrinfo(host: Any, *args: Any, **kwargs: Any) -> Any:
        if not _is_local(host):
            raise socket.gaierror(socket.EAI_NONAME, f"no DNS in tests: {host!r} not resolved")
        return original(host, *args, **kwargs)

    getaddrinfo.__wrapped__ = original  # type: ignore[attr-defined]
    return getaddrinfo
