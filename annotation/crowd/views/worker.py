"""The rating page: `/w/<campaign slug>/` with the crowd platform's query parameters.

One server-rendered page (consent and instructions with the rubric, the rating form, the end
screen) and `static/js/worker.js`, which drives the worker API with the worker token. The page uses
no cookie and no session: the token lives in the tab's sessionStorage, so the page also works inside
MTurk's iframe (third-party cookies blocked) and a reload resumes the live assignment.
"""

from __future__ import annotations

from typing import Any

from django.conf import settings
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import render
from django.urls import reverse
from django.views.decorators.clickjacking import xframe_options_exempt
from django.views.decorators.http import require_GET

from annotation.crowd.services.offers import levels_payload
from annotation.crowd.services.workers import (
    JoinRefused,
    external_id_normalize,
    external_id_problem,
    invite_token_read,
    screen_out_for_entry,
)
from annotation.models import Campaign, CampaignStatus
from annotation.questions import shared_levels
from annotation.selectors import campaign_modalities

MTURK_PREVIEW_ID = "ASSIGNMENT_ID_NOT_AVAILABLE"
MTURK_SUBMIT_HOSTS = ("https://www.mturk.com", "https://workersandbox.mturk.com")
# MTurk shows external questions in an iframe and takes the HIT's form posted back to it.
_CSP = "; ".join(
    [
        *settings.CSP_BASE_DIRECTIVES,
        f"form-action 'self' {' '.join(MTURK_SUBMIT_HOSTS)}",
        f"frame-ancestors 'self' {' '.join(MTURK_SUBMIT_HOSTS)}",
    ]
)


def _entry_from_query(request: HttpRequest) -> dict[str, Any] | None:
    """The join body implied by the crowd platform's query parameters (None if there are none)."""
    query = request.GET
    if query.get("PROLIFIC_PID"):
        return {
            "platform": "prolific",
            "external_id": query["PROLIFIC_PID"][:200],
            "study_id": query.get("STUDY_ID", "")[:200],
            "session_id": query.get("SESSION_ID", "")[:200],
        }
    if query.get("workerId") or query.get("assignmentId"):
        submit_to = query.get("turkSubmitTo", "").rstrip("/")
        return {
            "platform": "mturk",
            "external_id": query.get("workerId", "")[:200],
            "assignment_id": query.get("assignmentId", "")[:200],
            "hit_id": query.get("hitId", "")[:200],
            "turk_submit_to": submit_to if submit_to in MTURK_SUBMIT_HOSTS else "",
        }
    if query.get("invite"):
        return {"platform": "invite", "invite_token": query["invite"][:2000]}
    return None


def _questions_for_page(campaign: Campaign) -> list[dict[str, Any]]:
    return [
        {
            "key": question["key"],
            "label": question.get("label") or question["key"],
            "help": question.get("help", ""),
            "levels": levels_payload(question),
        }
        for question in campaign.questions
    ]


def rating_guide(questions: list[dict[str, Any]]) -> dict[str, Any]:
    """What the page shows of the rubric: one guide when every question has the same levels (the
    paper's holistic rubric), else each question's own levels under it. Best level first."""
    shared = shared_levels(questions)
    return {
        "shared_levels": sorted(shared, key=lambda level: -level["value"]) if shared else None,
        "guide_questions": [
            {**question, "levels": sorted(question["levels"], key=lambda level: -level["value"])}
            for question in questions
        ],
    }


def worker_response(
    request: HttpRequest, template: str, context: dict[str, Any], status: int
) -> HttpResponse:
    """A page the worker sees (also inside MTurk's iframe): its CSP, never cached."""
    response = render(request, template, context, status=status)
    response["Content-Security-Policy"] = _CSP
    response["Cache-Control"] = "no-store"
    return response


@require_GET
@xframe_options_exempt
def worker_entry(request: HttpRequest, slug: str) -> HttpResponse:
    campaign = Campaign.objects.filter(slug=slug, is_imported=False).first()
    if campaign is None:
        raise Http404("No such campaign.")
    context: dict[str, Any] = {"campaign": campaign}
    if campaign.status != CampaignStatus.ACTIVE:
        context["problem"] = "This study is not open at the moment. Thank you for your interest."
        return worker_response(request, "annotation/worker/problem.html", context, status=200)
    entry = _entry_from_query(request)
    if entry is None:
        context["problem"] = (
            "This link is missing your participant id. Please open the study from the link "
            "on your crowd platform (Prolific, MTurk) or from your invite."
        )
        return worker_response(request, "annotation/worker/problem.html", context, status=400)
    if entry["platform"] == "invite":
        try:
            invite = invite_token_read(token=entry["invite_token"], campaign=campaign)
        except JoinRefused as refused:
            context["problem"] = refused.message
            return worker_response(request, "annotation/worker/problem.html", context, status=403)
        identity = f"invite:{invite.invitee}"
    else:
        identity = f"{entry['platform']}:{entry['external_id']}"
    preview = entry["platform"] == "mturk" and (
        entry["assignment_id"] in ("", MTURK_PREVIEW_ID) or not entry["external_id"]
    )
    if entry["platform"] != "invite" and not preview:
        # The join would refuse this id: say so now, before consent and instructions.
        problem = external_id_problem(
            platform=entry["platform"],
            external_id=external_id_normalize(
                platform=entry["platform"], external_id=entry["external_id"]
            ),
        )
        if problem is not None:
            context["problem"] = (
                "This link does not carry a valid participant id. Please open the study from "
                "the link on your crowd platform."
            )
            return worker_response(request, "annotation/worker/problem.html", context, status=400)
        # A worker quality control excluded gets the screen-out at once (as `join` would say).
        screen_out = screen_out_for_entry(
            campaign=campaign, platform=entry["platform"], external_id=entry["external_id"]
        )
        if screen_out is not None:
            context.update({"problem": screen_out["detail"], "screen_out": screen_out})
            return worker_response(request, "annotation/worker/problem.html", context, status=403)
    questions = _questions_for_page(campaign)
    context.update(
        {
            "questions": questions,
            **rating_guide(questions),
            "modalities": campaign_modalities(campaign=campaign),
            "preview": preview,
            "config": {
                "slug": campaign.slug,
                "identity": identity,
                "join": entry,
                "preview": preview,
                "referenceFree": campaign.reference_free,
                "minSecondsOnClip": campaign.min_seconds_on_clip,
                "reasonAtOrBelow": campaign.reason_required_at_or_below,
                "questions": questions,
                "urls": {
                    "join": reverse("annotation_api:campaign-join", kwargs={"slug": campaign.slug}),
                    "next": reverse("annotation_api:worker-assignment-next"),
                    "me": reverse("annotation_api:worker-me"),
                    "submit": reverse(
                        "annotation_api:worker-assignment-submit", kwargs={"assignment_id": 0}
                    ).replace("/0/", "/{id}/"),
                },
                "mturk": {
                    "submitTo": entry.get("turk_submit_to", ""),
                    "assignmentId": entry.get("assignment_id", ""),
                },
            },
        }
    )
    return worker_response(request, "annotation/worker/rate.html", context, status=200)
