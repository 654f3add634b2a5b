"""Curator pages of releases under /dashboard/releases/: list and create, detail (progress,
statistics, downloads), compare two releases, re-run and cancel builds."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from django.contrib import messages
from django.http import HttpRequest, HttpResponse, StreamingHttpResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.views.decorators.http import require_POST

from common.forms import form_created
from common.permissions import curator_required
from common.routes import curator_page, route
from export.download import release_zip_folder, release_zip_stream
from export.forms import ReleaseForm
from export.models import Release
from export.reads.reasons import exclusion_label
from export.selectors import (
    release_builds,
    release_compare,
    release_files,
    release_licence_rows,
    release_list,
)
from export.services import release_cancel, release_create, release_rerun

View = Callable[..., HttpResponse]


def _list_context(request: HttpRequest, form: ReleaseForm) -> dict[str, Any]:
    return {
        "form": form,
        "releases": release_list(user=request.user)[:100],
        "builds": release_builds()[:50],
    }


@curator_page("", name="list")
def release_list_page(request: HttpRequest) -> HttpResponse:
    return render(request, "export/release_list.html", _list_context(request, ReleaseForm()))


@curator_page("new/", name="create", methods=("POST",))
def release_create_page(request: HttpRequest) -> HttpResponse:
    form = ReleaseForm(request.POST)
    release = form_created(
        form, lambda: release_create(**form.service_arguments(), created_by=request.user)
    )
    if release is None:
        return render(request, "export/release_list.html", _list_context(request, form), status=400)
    messages.success(request, f"Release {release.pk} is queued.")
    return redirect("export:detail", release_id=release.pk)


@curator_page("<int:release_id>/", name="detail")
def release_detail_page(request: HttpRequest, release_id: int) -> HttpResponse:
    release = get_object_or_404(release_list(user=request.user, status="all"), pk=release_id)
    other_id = request.GET.get("other")
    if other_id and other_id.isdigit():
        return redirect("export:compare", release_id=release.pk, other_id=int(other_id))
    others = (
        release_list(user=request.user)
        .exclude(pk=release.pk)
        .select_related(None)
        .prefetch_related(None)
        .only("pk", "name")[:100]
        if release.is_published
        else []
    )
    return render(
        request,
        "export/release_detail.html",
        {
            "release": release,
            "files": release_files(release=release),
            "others": others,
            "stats": release.stats,
            "agreement": sorted((release.stats or {}).get("agreement", {}).items()),
            "splits": list((release.stats or {}).get("splits", {}).items()),
            "excluded": [
                (reason, exclusion_label(reason), count)
                for reason, count in sorted((release.counts or {}).get("excluded", {}).items())
            ],
            "licences": release_licence_rows(release=release),
            "refresh": not release.is_finished,
        },
    )


@curator_page("<int:release_id>/compare/<int:other_id>/", name="compare")
def release_compare_page(request: HttpRequest, release_id: int, other_id: int) -> HttpResponse:
    published = release_list(user=request.user)
    release = get_object_or_404(published, pk=release_id)
    other = get_object_or_404(published, pk=other_id)
    comparison = release_compare(release=release, other=other, examples=20)
    return render(
        request,
        "export/release_compare.html",
        {
            "release": release,
            "other": other,
            "comparison": comparison,
            "summary": comparison["summary"],
            "histogram": list(comparison["summary"]["shift_histogram"].items()),
        },
    )


@curator_page("<int:release_id>/download.zip", name="download")
def release_download(request: HttpRequest, release_id: int) -> HttpResponse:
    """The whole published release as one zip, streamed from storage as it is written."""
    release = get_object_or_404(release_list(user=request.user), pk=release_id)
    response = StreamingHttpResponse(
        release_zip_stream(release=release), content_type="application/zip"
    )
    response["Content-Disposition"] = (
        f'attachment; filename="{release_zip_folder(release=release)}.zip"'
    )
    return response  # type: ignore[return-value]  # the decorators' type is HttpResponse


def _release_action_page(
    action: Callable[..., bool], *, done: str, refused: str
) -> Callable[[HttpRequest, int], HttpResponse]:
    """A curator's POST that changes a release's state from its page, says how it went, and goes
    back to the page."""

    @require_POST
    @curator_required
    def page(request: HttpRequest, release_id: int) -> HttpResponse:
        release = get_object_or_404(Release, pk=release_id)
        if action(release=release):
            messages.success(request, done.format(pk=release.pk))
        else:
            messages.error(request, refused)
        return redirect("export:detail", release_id=release.pk)

    return page


release_rerun_page = _release_action_page(
    release_rerun,
    done="Release {pk} is queued again.",
    refused="Only failed or cancelled releases can be re-run.",
)
route("<int:release_id>/rerun/", name="rerun")(release_rerun_page)
release_cancel_page = _release_action_page(
    release_cancel,
    done="Release {pk}: cancellation requested.",
    refused="Only queued or running releases can be cancelled.",
)
route("<int:release_id>/cancel/", name="cancel")(release_cancel_page)
