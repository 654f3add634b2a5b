"""Typed readers for environment variables that fail loudly on bad values.

Settings never hold a literal secret: everything comes from the process environment (optionally
seeded from a `.env` file by `config.settings`).
"""

from __future__ import annotations

import os


class ImproperlyConfiguredEnv(RuntimeError):
    """An environment variable holds a value that cannot be used."""


_TRUE = {"1", "true", "yes", "on"}
_FALSE = {"0", "false", "no", "off", ""}


def env_str(name: str, default: str | None = None) -> str | None:
    value = os.environ.get(name)
    return default if value is None else value


def env_bool(name: str, default: bool) -> bool:
    raw = os.environ.get(name)
    if raw is None:
        return default
    lowered = raw.strip().lower()
    if lowered in _TRUE:
        return True
    if lowered in _FALSE:
        return False
    raise ImproperlyConfiguredEnv(f"{name}={raw!r} is not a boolean (use true/false, 1/0, yes/no)")


def env_int(name: str, default: int, *, minimum: int | None = None) -> int:
    raw = os.environ.get(name)
    if raw is None or raw.strip() == "":
        return default
    try:
        value = int(raw)
    except ValueError as error:
        raise ImproperlyConfiguredEnv(f"{name}={raw!r} is not an integer") from error
    if minimum is not None and value < minimum:
        raise ImproperlyConfiguredEnv(f"{name}={value} is below the minimum {minimum}")
    return value


def env_float(name: str, default: float) -> float:
    raw = os.environ.get(name)
    if raw is None or raw.strip() == "":
        return default
    try:
        return float(raw)
    except ValueError as error:
        raise ImproperlyConfiguredEnv(f"{name}={raw!r} is not a number") from error


def env_list(name: str, default: list[str]) -> list[str]:
    raw = os.environ.get(name)
    if raw is None:
        return list(default)
    return [item.strip() for item in raw.split(",") if item.strip()]


def load_dotenv_file(path: str) -> None:
    """Seed os.environ from a simple KEY=VALUE file without overriding what is already set."""
    if not os.path.isfile(path):
        return
    with open(path, encoding="utf-8") as handle:
        for line_number, line in enumerate(handle, start=1):
            stripped = line.strip()
            if not stripped or stripped.startswith("#"):
                continue
            if "=" not in stripped:
                raise ImproperlyConfiguredEnv(f"{path}:{line_number}: expected KEY=VALUE")
            key, value = stripped.split("=", 1)
            value = value.strip().strip('"').strip("'")
            os.environ.setdefault(key.strip(), value)
