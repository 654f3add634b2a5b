"""The data browser's pages (/dashboard/datasets/...): clips, candidates, judgments and workers as
tables filtered and sorted on the server and paged by keyset, and the clip and candidate pages
behind their rows (a worker's row opens the campaign's worker page). Curators only."""

from __future__ import annotations

from collections.abc import Callable
from functools import partial
from typing import Any

from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import render
from django.views.decorators.http import require_GET

from annotation.curation.browse import selectors
from annotation.curation.browse.forms import (
    CandidateTableForm,
    ClipTableForm,
    JudgmentTableForm,
    TableForm,
    WorkerTableForm,
)
from annotation.curation.browse.links import Links
from annotation.curation.browse.pagination import CursorInvalid, Page
from annotation.models import CampaignCandidate
from common.permissions import curator_required
from common.routes import curator_page, route
from datasets_app.models import Clip

TABLES: dict[str, tuple[str, type[TableForm], Callable[..., Page]]] = {
    "clips": ("Clips", ClipTableForm, selectors.clips_page),
    "candidates": ("Candidates", CandidateTableForm, selectors.candidates_page),
    "judgments": ("Judgments", JudgmentTableForm, selectors.judgments_page),
    "workers": ("Workers", WorkerTableForm, selectors.workers_page),
}


def _query(request: HttpRequest, **changes: str | None) -> str:
    """The current query string with `changes` applied (None removes a parameter)."""
    query = request.GET.copy()
    for key, value in changes.items():
        query.pop(key, None)
        if value is not None:
            query[key] = value
    encoded = query.urlencode()
    return f"?{encoded}" if encoded else "?"


def table_context(request: HttpRequest, table: str) -> tuple[dict[str, Any], int]:
    """Parse a table's query, read its page; the context of `browse_<table>.html` and a status
    (400 for a filter or cursor that does not validate)."""
    title, form_class, read = TABLES[table]
    form = form_class(request.GET)
    context: dict[str, Any] = {"table": table, "title": title, "form": form, "tables": TABLES}
    if not form.is_valid():
        return context, 400
    sort, descending = form.cleaned_data["sort"], form.descending()
    try:
        page = read(
            filters=form.filters(),
            sort=sort,
            descending=descending,
            after=form.cleaned_data["after"],
            size=form.cleaned_data["size"],
        )
    except CursorInvalid as error:
        form.add_error("after", str(error))
        return context, 400
    getattr(Links(), table)(page.rows)
    context.update(
        {
            "page": page,
            "next_url": _query(request, after=page.next_cursor) if page.next_cursor else None,
            "first_url": None if page.is_first else _query(request, after=None),
            "sorts": [
                {
                    "label": option.label,
                    "active": option.key == sort.key,
                    "descending": descending,
                    "url": _query(
                        request,
                        sort=option.key,
                        after=None,
                        order="asc" if option.key == sort.key and descending else "desc",
                    ),
                }
                for option in form_class.SORTS
            ],
        }
    )
    return context, 200


def _table_view(table: str) -> Callable[[HttpRequest], HttpResponse]:
    @require_GET
    @curator_required
    def view(request: HttpRequest) -> HttpResponse:
        context, status = table_context(request, table)
        return render(request, f"annotation/data/browse_{table}.html", context, status=status)

    view.__name__ = f"browse_{table}"
    view.__doc__ = f"The {table} table of the data browser."
    return view


browse_clips = _table_view("clips")
route("datasets/clips/", name="browse-clips")(browse_clips)
browse_candidates = _table_view("candidates")
route("datasets/candidates/", name="browse-candidates")(browse_candidates)
browse_judgments = _table_view("judgments")
route("datasets/judgments/", name="browse-judgments")(browse_judgments)
browse_workers = _table_view("workers")
route("datasets/workers/", name="browse-workers")(browse_workers)


def _detail(
    request: HttpRequest,
    page: str,
    read: Callable[[], dict[str, object]],
    missing: tuple[type[Exception], str],
) -> HttpResponse:
    """The detail page `page` of what `read` returns; 404 with the message of `missing` (the
    exception that says it does not exist, the message)."""
    absent, message = missing
    try:
        context = read()
    except absent as error:
        raise Http404(message) from error
    return render(request, f"annotation/data/{page}.html", context)


@curator_page("datasets/clips/<int:clip_id>/", name="browse-clip")
def browse_clip(request: HttpRequest, clip_id: int) -> HttpResponse:
    read = partial(selectors.clip_detail, clip_id=clip_id)
    return _detail(request, "clip_detail", read, (Clip.DoesNotExist, "No such clip."))


@curator_page("datasets/candidates/<int:item_id>/", name="browse-candidate")
def browse_candidate(request: HttpRequest, item_id: int) -> HttpResponse:
    read = partial(selectors.candidate_detail, campaign_candidate_id=item_id)
    return _detail(
        request, "candidate_detail", read, (CampaignCandidate.DoesNotExist, "No such candidate.")
    )
