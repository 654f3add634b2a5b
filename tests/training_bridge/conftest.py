"""Fixtures of the training tests (see training_fixtures.py)."""

from __future__ import annotations

import pytest

from tests.training_bridge.training_fixtures import make_published_release


@pytest.fixture
def published_release(db):  # type: ignore[no-untyped-def]
    return make_published_release()


@pytest.fixture
def cpu_only_machine(settings, monkeypatch, tmp_path):  # type: ignore[no-untyped-def]
    """No NVIDIA driver entry and no configured device list: this machine's CPU only."""
    from training_bridge.services import machine

    settings.LEPUS_TRAINING_DEVICES = []
    monkeypatch.setattr(machine, "NVIDIA_GPUS", tmp_path / "no-nvidia-driver")
