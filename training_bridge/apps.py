from __future__ import annotations

from django.apps import AppConfig


class TrainingBridgeConfig(AppConfig):
    name = "training_bridge"
    verbose_name = "Training bridge: Rigel runs and scoring"

    def ready(self) -> None:
        # annotation checks a campaign's metric through common (it never imports this app).
        from common.campaign_metric import campaign_metric_checker_register

        campaign_metric_checker_register(_campaign_metric_check)


def _campaign_metric_check(metric: str, clip_ids: frozenset[int]) -> str | None:
    """training_bridge's metric checker, imported when a metric is first checked rather than at
    start-up: its services load NumPy and the metric registry, which every process (web, worker,
    command) would otherwise pay for at `django.setup()`."""
    from training_bridge.services.campaign_metric import campaign_metric_checker

    return campaign_metric_checker(metric, clip_ids)
