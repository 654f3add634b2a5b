from __future__ import annotations

from django.apps import AppConfig


class AnnotationConfig(AppConfig):
    name = "annotation"
    verbose_name = "Annotation: campaigns, crowd work, quality control, review"
