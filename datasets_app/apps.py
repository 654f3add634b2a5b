from __future__ import annotations

from django.apps import AppConfig


class DatasetsAppConfig(AppConfig):
    name = "datasets_app"
    verbose_name = "Datasets: clips, references, candidates"
