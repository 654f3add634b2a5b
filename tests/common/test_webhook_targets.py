"""Issue 25, finding 6: webhook targets in shared (100.64.0.0/10, with the cloud metadata address
100.100.100.200) and transition (6to4 2002:7f00:1:: = 127.0.0.1) address space were registered,
because the refused ranges were a hand-made list of address properties. Now only globally
routable addresses pass (`webhooks.is_public_address`, from the standard library's `is_global`,
with the IPv4 address inside an IPv4-mapped, 6to4 or Teredo address judged too), at registration
and at connection. The replay through the production-mode server is in
tests/hardening/test_bounds_server.py."""

from __future__ import annotations

import pytest

from common import webhooks
from common.models import WebhookEndpoint

REFUSED = [
    "100.64.0.1",  # shared address space (carrier-grade NAT), RFC 6598
    "100.100.100.200",  # a cloud metadata service, in the shared space
    "100.127.255.254",
    "2002:7f00:1::",  # 6to4 of 127.0.0.1
    "2002:a00:1::",  # 6to4 of 10.0.0.1
    "2002:6464:64c8::",  # 6to4 of 100.100.100.200
    "2001:0:4136:e378:8000:63bf:3fff:fdd2",  # Teredo
    "::ffff:100.100.100.200",  # IPv4-mapped
    "::ffff:127.0.0.1",
    "64:ff9b::7f00:1",  # NAT64 of 127.0.0.1
    "::7f00:1",  # IPv4-compatible (deprecated) 127.0.0.1
    "127.0.0.1",
    "10.0.0.1",
    "172.16.0.1",
    "192.168.1.1",
    "169.254.169.254",
    "0.0.0.0",
    "198.18.0.1",  # benchmarking
    "192.0.2.1",  # documentation
    "224.0.0.1",  # multicast (is_global says True for it)
    "240.0.0.1",  # reserved
    "255.255.255.255",
    "::",
    "::1",
    "fe80::1",
    "fc00::1",
    "ff02::1",
    "2001:db8::1",
]
ALLOWED = [
    "93.184.215.14",
    "8.8.8.8",
    "::ffff:8.8.8.8",  # the same host as 8.8.8.8
    "2606:4700:4700::1111",
    "2002:808:808::",  # 6to4 of 8.8.8.8
]


@pytest.mark.parametrize("address", REFUSED)
def test_addresses_that_are_not_globally_routable_are_refused(address):
    assert webhooks.is_public_address(address) is False


@pytest.mark.parametrize("address", ALLOWED)
def test_globally_routable_addresses_pass(address):
    assert webhooks.is_public_address(address) is True


@pytest.mark.django_db
def test_registration_refuses_shared_and_transition_space(settings):
    settings.LEPUS_WEBHOOK_ALLOW_PRIVATE = False
    for host in ("100.64.0.1", "100.100.100.200", "[2002:7f00:1::]", "[::ffff:100.64.0.9]"):
        with pytest.raises(webhooks.WebhookTargetRefused, match="non-public"):
            webhooks.register_endpoint(f"http://{host}/latest/meta-data/")
    assert WebhookEndpoint.objects.count() == 0
    assert webhooks.register_endpoint("https://[2606:4700:4700::1111]/hook").pk


class _ConnectedSocket:
    """Stands in for a socket connected to `address`: 100.100.100.200 cannot be reached from a
    test, and what is checked is only the peer address the socket reports."""

    def __init__(self, address: str) -> None:
        self.address = address
        self.closed = False

    def getpeername(self) -> tuple[str, int]:
        return (self.address, 80)

    def close(self) -> None:
        self.closed = True


def test_a_connection_that_lands_in_shared_space_is_closed_before_sending(settings):
    settings.LEPUS_WEBHOOK_ALLOW_PRIVATE = False
    for address in ("100.100.100.200", "2002:7f00:1::"):
        sock = _ConnectedSocket(address)
        with pytest.raises(webhooks.WebhookTargetRefused, match=f"non-public address {address}"):
            webhooks._refuse_private_peer(sock)  # type: ignore[arg-type]
        assert sock.closed
    public = _ConnectedSocket("93.184.215.14")
    webhooks._refuse_private_peer(public)  # type: ignore[arg-type]
    assert not public.closed
