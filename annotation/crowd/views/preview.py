"""Preview as a worker (/dashboard/campaigns/<slug>/preview/): a curator opens any campaign's
rating page exactly as a worker sees it — the worker's template and script, a "Preview — nothing
is stored" banner — and the script talks to the four preview URLs below instead of the worker
API. They answer with the worker API's bodies and status codes; see
`annotation.crowd.services.preview` for why nothing is stored and how the token works."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from django.http import HttpRequest, HttpResponse, JsonResponse
from django.shortcuts import get_object_or_404
from django.urls import reverse
from django.views.decorators.cache import never_cache
from django.views.decorators.csrf import csrf_exempt
from django.views.decorators.http import require_GET, require_POST

from annotation.crowd.auth import KEYWORD
from annotation.crowd.services.preview import (
    PreviewRefused,
    PreviewSession,
    preview_next,
    preview_progress,
    preview_session,
    preview_submit,
    preview_token_issue,
)
from annotation.crowd.services.submission import SubmissionInvalid
from annotation.crowd.views.worker import _questions_for_page, rating_guide, worker_response
from annotation.models import Campaign
from annotation.selectors import campaign_modalities
from common.parsers import JSONInvalid, json_parse
from common.routes import curator_page, route

MAX_BODY_BYTES = 256 * 1024


@curator_page("campaigns/<slug:slug>/preview/", name="preview")
def campaign_preview(request: HttpRequest, slug: str) -> HttpResponse:
    campaign = get_object_or_404(Campaign, slug=slug)
    token = preview_token_issue(campaign=campaign, user=request.user)
    questions = _questions_for_page(campaign)
    urls = {
        "join": reverse("annotation:preview-join", args=[slug]),
        "next": reverse("annotation:preview-next", args=[slug]),
        "me": reverse("annotation:preview-me", args=[slug]),
        "submit": reverse("annotation:preview-submit", args=[slug, 0]).replace("/0/", "/{id}/"),
    }
    context: dict[str, Any] = {
        "campaign": campaign,
        "questions": questions,
        **rating_guide(questions),
        "modalities": campaign_modalities(campaign=campaign),
        "preview": False,
        "curator_preview": True,
        "config": {
            "slug": campaign.slug,
            # A fresh identity per opening: the script keeps its token per identity in the tab.
            "identity": f"curator-preview:{token[-16:]}",
            "join": {"preview_token": token},
            "preview": False,
            "referenceFree": campaign.reference_free,
            "minSecondsOnClip": campaign.min_seconds_on_clip,
            "reasonAtOrBelow": campaign.reason_required_at_or_below,
            "questions": questions,
            "urls": urls,
            "mturk": {"submitTo": "", "assignmentId": ""},
        },
    }
    return worker_response(request, "annotation/worker/rate.html", context, status=200)


def _error(status: int, detail: str) -> JsonResponse:
    return JsonResponse({"detail": detail}, status=status)


def _json_body(request: HttpRequest, *, empty: bytes) -> Any:
    """The parsed body (`empty` parsed when there is none), or the 413/400 answer the worker API
    gives for a body too large or not JSON."""
    if len(request.body) > MAX_BODY_BYTES:
        return _error(413, "The request body is too large.")
    try:
        return json_parse(request.body or empty)
    except JSONInvalid as invalid:
        return _error(400, invalid.detail)


def _with_session(
    view: Callable[[HttpRequest, PreviewSession, dict[str, Any]], HttpResponse],
) -> Callable[..., HttpResponse]:
    """Authenticate `Authorization: Worker <preview token>` for the campaign in the URL."""

    def wrapper(request: HttpRequest, slug: str, **kwargs: Any) -> HttpResponse:
        scheme, _, token = request.headers.get("Authorization", "").partition(" ")
        if scheme.lower() != KEYWORD.lower() or not token.strip():
            response = _error(401, "A preview token is required (Authorization: Worker <token>).")
            response["WWW-Authenticate"] = KEYWORD
            return response
        try:
            session = preview_session(token=token.strip())
        except PreviewRefused as refused:
            return _error(401, str(refused))
        if session.campaign.slug != slug:
            return _error(401, "This preview token is for another campaign.")
        answer = view(request, session, kwargs)
        answer["Cache-Control"] = "no-store"
        return answer

    return wrapper


# The script sends no cookie (`credentials: "omit"`), so there is no session for a cross-site
# request to ride on: the signed token in a header is the only credential, hence csrf_exempt.


@route("campaigns/<slug:slug>/preview/join", name="preview-join")
@csrf_exempt
@require_POST
def preview_join(request: HttpRequest, slug: str) -> JsonResponse:
    body = _json_body(request, empty=b"{}")
    if isinstance(body, JsonResponse):
        return body
    try:
        token = body["preview_token"]
        if not isinstance(token, str):
            raise TypeError(token)
        session = preview_session(token=token)
    except (ValueError, KeyError, TypeError):
        return JsonResponse({"preview_token": ["This field is required."]}, status=400)
    except PreviewRefused as refused:
        return _error(403, str(refused))
    if session.campaign.slug != slug:
        return _error(403, "This preview token is for another campaign.")
    return JsonResponse({"worker_token": token})


def _next(request: HttpRequest, session: PreviewSession, kwargs: dict[str, Any]) -> HttpResponse:
    offer = preview_next(session=session)
    if offer is None:
        return HttpResponse(status=204)
    return JsonResponse(offer)


def _submit(request: HttpRequest, session: PreviewSession, kwargs: dict[str, Any]) -> JsonResponse:
    body = _json_body(request, empty=b"null")
    if isinstance(body, JsonResponse):
        return body
    try:
        result = preview_submit(session=session, number=kwargs["assignment_id"], body=body)
    except SubmissionInvalid as invalid:
        return JsonResponse(invalid.errors, status=400)
    if result is None:
        return _error(404, "No such assignment in this preview.")
    return JsonResponse(result, status=201)


def _me(request: HttpRequest, session: PreviewSession, kwargs: dict[str, Any]) -> JsonResponse:
    return JsonResponse(preview_progress(session=session))


preview_next_view = csrf_exempt(require_POST(never_cache(_with_session(_next))))
route("campaigns/<slug:slug>/preview/next", name="preview-next")(preview_next_view)
preview_submit_view = csrf_exempt(require_POST(never_cache(_with_session(_submit))))
route(
    "campaigns/<slug:slug>/preview/assignments/<int:assignment_id>/submit", name="preview-submit"
)(preview_submit_view)
preview_me_view = require_GET(never_cache(_with_session(_me)))
route("campaigns/<slug:slug>/preview/me", name="preview-me")(preview_me_view)
