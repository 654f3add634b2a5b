"""Erasure pages (docs/privacy.md): the worker's erase page (/w/<slug>/erase/, linked from the end
screen) and the curator's erase action on a worker's page. Both call the same service as the API."""

from __future__ import annotations

from django.contrib import messages
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import get_object_or_404, redirect
from django.urls import reverse
from django.views.decorators.clickjacking import xframe_options_exempt
from django.views.decorators.http import require_GET, require_POST

from annotation.crowd.views.worker import worker_response
from annotation.models import Campaign, Participation
from annotation.privacy.services import ErasureRefused, participation_erase
from common.permissions import curator_required


@require_GET
@xframe_options_exempt
def worker_erase_page(request: HttpRequest, slug: str) -> HttpResponse:
    """The erase page linked from the end screen: a confirmation, then the done screen
    (`static/js/erase.js` erases through the worker API with this tab's worker token)."""
    campaign = Campaign.objects.filter(slug=slug, is_imported=False).first()
    if campaign is None:
        raise Http404("No such campaign.")
    config = {"slug": campaign.slug, "urls": {"erase": reverse("annotation_api:worker-erase")}}
    return worker_response(
        request, "annotation/worker/erase.html", {"campaign": campaign, "config": config}, 200
    )


@require_POST
@curator_required
def worker_erase_view(request: HttpRequest, slug: str, participation_id: int) -> HttpResponse:
    campaign = get_object_or_404(Campaign, slug=slug)
    participation = get_object_or_404(Participation, pk=participation_id, campaign=campaign)
    back = reverse("annotation:quality-worker", args=[campaign.slug, participation.pk])
    if request.POST.get("confirm") != "erase":
        messages.error(request, "Nothing was erased: tick the confirmation box first.")
        return redirect(back)
    try:
        outcome = participation_erase(
            participation=participation, actor=request.user, requested_by="curator"
        )
    except ErasureRefused as refused:
        messages.error(request, str(refused))
        return redirect(back)
    # The message names no id: it is stored in the session until shown.
    messages.success(
        request,
        f"The participant was erased from {outcome.participations} campaign(s): "
        f"{outcome.judgments_deleted} judgment(s) deleted, {outcome.judgments_pseudonymised} "
        f"kept under a pseudonym, {outcome.reasons_erased} free-text reason(s) erased.",
    )
    return redirect(reverse("annotation:quality-workers", kwargs={"slug": campaign.slug}))
