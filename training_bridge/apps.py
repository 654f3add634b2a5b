from __future__ import annotations

from django.apps import AppConfig


class TrainingBridgeConfig(AppConfig):
    name = "training_bridge"
    verbose_name = "Training bridge: Rigel runs and scoring"
