"""The curator's Data page: what was imported, the platform's totals (clips to judgments), the clips
by video status, and the video jobs, which a curator may send to a worker again."""

from __future__ import annotations

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.core.exceptions import PermissionDenied
from django.http import HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.views.decorators.http import require_POST

from annotation.selectors import platform_stats
from common.permissions import is_curator
from common.routes import curator_page, route
from datasets_app.models import VideoAttachJob
from datasets_app.selectors import clips_with_errors, import_batches_recent, video_jobs_recent
from datasets_app.services.video import video_attach_job_requeue


@curator_page("datasets/", name="data")
def data_page(request: HttpRequest) -> HttpResponse:
    jobs = list(video_jobs_recent(limit=20))
    context = {
        "stats": platform_stats(),
        "batches": import_batches_recent(limit=50),
        "jobs": jobs,
        "error_clips": clips_with_errors(limit=20),
        # Refresh while a job runs, so the progress moves without any script.
        "refresh_seconds": 5 if any(not job.is_finished for job in jobs) else None,
    }
    return render(request, "annotation/data/data.html", context)


@route("datasets/video-jobs/<int:job_id>/retry", name="video-job-retry")
@login_required
@require_POST
def video_job_retry(request: HttpRequest, job_id: int) -> HttpResponse:
    # The method is checked before the role here (a GET from anyone logged in is 405).
    if not is_curator(request.user):
        raise PermissionDenied("Curator role required.")
    try:
        job = video_attach_job_requeue(job_id=job_id)
    except VideoAttachJob.DoesNotExist:
        messages.error(request, f"There is no video job {job_id}.")
    except ValueError as error:
        messages.error(request, str(error))
    else:
        messages.success(request, f"Video job {job.pk} is queued again.")
    return redirect("annotation:data")
