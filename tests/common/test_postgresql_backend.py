"""The PostgreSQL backend (common/postgresql): Django's health check, except for a connection that
started a statement less than a second ago."""

from __future__ import annotations

import pytest
from django.db import connection

from common.postgresql import base as backend

pytestmark = pytest.mark.django_db


@pytest.fixture
def pings(monkeypatch):  # type: ignore[no-untyped-def]
    calls: list[bool] = []
    original = backend.DatabaseWrapper.is_usable

    def is_usable(self):  # type: ignore[no-untyped-def]
        calls.append(True)
        return original(self)

    monkeypatch.setattr(backend.DatabaseWrapper, "is_usable", is_usable)
    monkeypatch.setitem(connection.settings_dict, "CONN_HEALTH_CHECKS", True)
    return calls


def _new_request() -> None:
    """What Django does for the health check at the start of a request."""
    connection.health_check_done = False


def _query() -> None:
    with connection.cursor() as cursor:
        cursor.execute("SELECT 41 + 1")
        assert cursor.fetchone() == (42,)


def test_the_settings_select_this_backend():
    from django.db import connections

    assert isinstance(connections["default"], backend.DatabaseWrapper)
    assert connection.vendor == "postgresql"


def test_a_connection_used_a_moment_ago_is_not_pinged(pings):
    _query()
    _new_request()
    _query()
    assert pings == []


def test_a_connection_idle_for_longer_is_pinged_and_replaced_when_dead(pings, monkeypatch):
    _query()
    connection._used_at -= backend.RECENTLY_USED_SECONDS + 0.5
    _new_request()
    _query()
    assert pings == [True]  # pinged once, found usable, kept

    connection._used_at -= backend.RECENTLY_USED_SECONDS + 0.5
    _new_request()
    monkeypatch.setattr(backend.DatabaseWrapper, "close", lambda self: calls_close.append(True))
    calls_close: list[bool] = []
    monkeypatch.setattr(
        backend.DatabaseWrapper, "is_usable", lambda self: pings.append(True) or False
    )
    connection.close_if_health_check_failed()
    assert pings == [True, True] and calls_close == [True]  # a dead one would be closed


def test_prepared_statements_get_generic_plans(settings):
    settings.LEPUS_DB_PREPARED_STATEMENTS = True
    assert backend.GENERIC_PLANS_OPTION in connection.get_connection_params()["options"]
    session = connection.get_new_connection(connection.get_connection_params())
    try:
        with session.cursor() as cursor:
            cursor.execute("SHOW plan_cache_mode")
            assert cursor.fetchone() == ("force_generic_plan",)
    finally:
        session.close()


def test_no_startup_option_behind_a_pooler(settings):
    # PgBouncer refuses unknown startup parameters; prepared statements are off behind one.
    settings.LEPUS_DB_PREPARED_STATEMENTS = False
    assert "plan_cache_mode" not in connection.get_connection_params().get("options", "")
