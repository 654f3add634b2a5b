from __future__ import annotations

from django.apps import AppConfig


class TrainingBridgeConfig(AppConfig):
    name = "training_bridge"
    verbose_name = "Training bridge: Rigel runs and scoring"

    def ready(self) -> None:
        # annotation checks a campaign's metric through common (it never imports this app).
        from common.campaign_metric import campaign_metric_checker_register
        from training_bridge.services.campaign_metric import campaign_metric_checker

        campaign_metric_checker_register(campaign_metric_checker)
