"""Read-only admin of releases: builds are started through the dashboard, the API or
`manage.py build_release`, never by editing rows."""

from __future__ import annotations

from typing import Any

from django.contrib import admin
from django.http import HttpRequest

from export.models import Release


@admin.register(Release)
class ReleaseAdmin(admin.ModelAdmin):
    list_display = ("id", "name", "status", "progress_percent", "seed", "created_at", "finished_at")
    list_filter = ("status",)
    search_fields = ("name",)
    readonly_fields = [field.name for field in Release._meta.concrete_fields] + ["campaigns"]

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False
