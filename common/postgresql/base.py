"""Django's PostgreSQL backend, minus the health check of a connection used a moment ago.

With `conn_health_checks` on, Django pings a reused connection (`SELECT 1`, one round trip) at the
first query of every request. On the worker API that was 2 of the 14 round trips of a `next` →
`submit` cycle (bench/crowd_hot_path.py). Here a connection that started a statement less than
`RECENTLY_USED_SECONDS` ago is not pinged: it was working a moment ago, and a connection that
breaks in between fails its next statement instead, which the API answers with 503 and Django
closes at the end of that request (as it does for any failed connection). A connection that sat
idle longer — after a database restart, say — is pinged and replaced before use, as before.
"""

from __future__ import annotations

import time
from typing import Any

from django.conf import settings
from django.db.backends.postgresql import base

RECENTLY_USED_SECONDS = 1.0


# Generic plans for the worker hot path's prepared statements (crowd_sql._execute): left to
# itself, PostgreSQL planned two of the seven afresh on every EXECUTE (its cost estimate for a
# custom plan came out below the generic one's), 0.17 ms of planning per `next` for 0.05 ms of
# execution. With psycopg2 nothing else in Lepus prepares statements (Django interpolates
# parameters client-side) and Lepus defines no PL/pgSQL, so the setting reaches only those seven.
GENERIC_PLANS_OPTION = "-c plan_cache_mode=force_generic_plan"


class DatabaseWrapper(base.DatabaseWrapper):
    _used_at = float("-inf")

    def get_connection_params(self) -> dict[str, Any]:
        params: dict[str, Any] = super().get_connection_params()
        # Not behind a pooler (prepared statements off): PgBouncer refuses startup `options`.
        if settings.LEPUS_DB_PREPARED_STATEMENTS:
            params["options"] = " ".join(
                filter(None, [params.get("options"), GENERIC_PLANS_OPTION])
            )
        return params

    def close_if_health_check_failed(self) -> None:
        if (
            self.connection is not None
            and self.health_check_enabled  # type: ignore[attr-defined]
            and time.monotonic() - self._used_at < RECENTLY_USED_SECONDS
        ):
            self.health_check_done = True
            return
        super().close_if_health_check_failed()

    def _cursor(self, name: Any = None) -> Any:
        cursor = super()._cursor(name)  # type: ignore[misc]
        self._used_at = time.monotonic()
        return cursor
