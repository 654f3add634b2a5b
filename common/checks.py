"""Lepus's own `manage.py check --deploy` warnings: production settings that work but quietly
weaken a guarantee. Django's deploy checks (security.W0xx: DEBUG, the secret key, HTTPS, cookies,
HSTS) run beside these; each of ours names the setting that fixes it.

| id | when | why it matters |
|---|---|---|
| lepus.W001 | the cache is not Redis (`REDIS_URL` unset) | throttles and the login lockout count per process (local memory) or non-atomically (database cache) |
| lepus.W002 | media on local disk (`LEPUS_S3_BUCKET` unset) | clips and releases exist on this machine only |
| lepus.W003 | the Celery broker is the filesystem one | tasks reach workers on this machine only |
| lepus.W004 | `LEPUS_WEBHOOK_ALLOW_PRIVATE` on | webhooks may reach loopback, private and link-local addresses |
| lepus.W005 | `LEPUS_CHECK_WORKER_IDS` off | any made-up id can join a campaign |
| lepus.W007 | `DJANGO_ALLOWED_HOSTS` loopback only or `*` | the default serves no public name; `*` trusts every Host header |
| lepus.W008 | `LEPUS_RELEASE_PSEUDONYM_SECRET` unset | pseudonyms follow `DJANGO_SECRET_KEY`: rotating it changes every release's bytes |
"""

from __future__ import annotations

from typing import Any

from django.conf import settings
from django.core.checks import CheckMessage, Warning, register

REDIS_CACHE_BACKEND = "common.cache.RedisCache"
LOOPBACK_HOSTS = {"localhost", "127.0.0.1", "[::1]", "::1"}


@register(deploy=True)
def deploy_checks(app_configs: Any = None, **kwargs: Any) -> list[CheckMessage]:
    return [*_shared_services_warnings(), *_unsafe_settings_warnings()]


def _shared_services_warnings() -> list[CheckMessage]:
    """Cache, storage and broker local to one machine, where a deployment runs on several."""
    found: list[CheckMessage] = []
    if settings.CACHES["default"]["BACKEND"] != REDIS_CACHE_BACKEND:
        found.append(
            Warning(
                "REDIS_URL is not set: the API throttles and the curator login lockout count in "
                "each web process's own memory (or, with LEPUS_DB_CACHE, non-atomically in the "
                "database), so N processes let N times the limits through.",
                hint="Set REDIS_URL=redis://host:6379/1 (docs/deployment.md).",
                id="lepus.W001",
            )
        )
    if not settings.LEPUS_S3_BUCKET:
        found.append(
            Warning(
                "LEPUS_S3_BUCKET is not set: clips, posters and releases are stored on this "
                "machine's disk, out of reach of workers and web servers on other machines.",
                hint="Set LEPUS_S3_BUCKET (and LEPUS_S3_ENDPOINT_URL for a non-AWS S3).",
                id="lepus.W002",
            )
        )
    if str(settings.CELERY_BROKER_URL).startswith("filesystem://"):
        found.append(
            Warning(
                "CELERY_BROKER_URL is the filesystem broker: tasks reach Celery workers on this "
                "machine only, and nothing acknowledges or redelivers them as a broker does.",
                hint="Set CELERY_BROKER_URL=amqp://... or redis://... (docs/deployment.md).",
                id="lepus.W003",
            )
        )
    return found


def _unsafe_settings_warnings() -> list[CheckMessage]:
    """Settings for tests and closed networks left on in production."""
    found: list[CheckMessage] = []
    if settings.LEPUS_WEBHOOK_ALLOW_PRIVATE:
        found.append(
            Warning(
                "LEPUS_WEBHOOK_ALLOW_PRIVATE is on: webhook endpoints may point at loopback, "
                "private and link-local addresses (this server's own services included).",
                hint="Leave it off outside tests and closed networks (docs/webhooks.md).",
                id="lepus.W004",
            )
        )
    if not settings.LEPUS_CHECK_WORKER_IDS:
        found.append(
            Warning(
                "LEPUS_CHECK_WORKER_IDS is off: a join with any made-up id is accepted as a new "
                "worker.",
                hint="Leave LEPUS_CHECK_WORKER_IDS on (docs/deployment.md).",
                id="lepus.W005",
            )
        )
    hosts = set(settings.ALLOWED_HOSTS)
    if "*" in hosts or hosts <= LOOPBACK_HOSTS:
        found.append(
            Warning(
                f"DJANGO_ALLOWED_HOSTS is {sorted(hosts)}: "
                + (
                    "every Host header is trusted (absolute URLs built from a request can be "
                    "pointed at another site)."
                    if "*" in hosts
                    else "only loopback names, so the site answers no public host name."
                ),
                hint="Set DJANGO_ALLOWED_HOSTS to the site's host names.",
                id="lepus.W007",
            )
        )
    if not settings.LEPUS_RELEASE_PSEUDONYM_SECRET:
        found.append(
            Warning(
                "LEPUS_RELEASE_PSEUDONYM_SECRET is not set: release pseudonyms are derived from "
                "DJANGO_SECRET_KEY, so rotating the secret key changes every pseudonym and the "
                "bytes of every rebuilt release.",
                hint="Set LEPUS_RELEASE_PSEUDONYM_SECRET to its own long random value.",
                id="lepus.W008",
            )
        )
    return found
