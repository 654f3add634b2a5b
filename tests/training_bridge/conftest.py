"""Fixtures of the training tests (see training_fixtures.py)."""

from __future__ import annotations

import pytest

from tests.training_bridge.training_fixtures import make_published_release


@pytest.fixture
def published_release(db):  # type: ignore[no-untyped-def]
    return make_published_release()
