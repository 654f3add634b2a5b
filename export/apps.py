from __future__ import annotations

from django.apps import AppConfig


class ExportConfig(AppConfig):
    name = "export"
    verbose_name = "Export: Vid-Lepus releases"
