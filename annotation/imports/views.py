"""The import page (/dashboard/datasets/imports/): a curator uploads a candidates, VATEX,
judgments or VATEX-EVAL file or a video archive; each becomes a Celery job whose page shows its
progress, then what was written, or the refusal (file, line, field) next to the form to upload a
corrected file."""

from __future__ import annotations

from typing import TypedDict

from django import forms
from django.conf import settings
from django.contrib import messages
from django.db.models import QuerySet
from django.http import HttpRequest, HttpResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.views.decorators.http import require_GET, require_http_methods, require_POST

from annotation.imports.uploads import (
    KIND_SUFFIXES,
    UploadRefused,
    import_upload_create,
    import_upload_retry,
    upload_declared_too_large,
)
from annotation.models import ImportUpload, UploadKind
from annotation.selectors import import_uploads_recent
from common.permissions import curator_required


class ImportUploadForm(forms.Form):
    kind = forms.ChoiceField(choices=UploadKind.choices, label="What the file holds")
    file = forms.FileField(label="File")
    campaign = forms.SlugField(
        max_length=50,
        required=False,
        label="Campaign (judgments, or still images with judgments)",
        help_text="The campaign's slug; a new slug creates an imported campaign.",
    )
    file_format = forms.ChoiceField(
        choices=[("", "from the file's extension"), ("jsonl", "JSONL"), ("csv", "CSV")],
        required=False,
        label="Format (candidates and judgments)",
    )


class ImportPageContext(TypedDict):
    """What the import page and an upload's page render."""

    form: ImportUploadForm
    upload_error: str
    job: ImportUpload | None
    uploads: QuerySet[ImportUpload]
    accept: str
    upload_limit: int


def _accept_attribute() -> str:
    return ",".join(sorted({suffix for suffixes in KIND_SUFFIXES.values() for suffix in suffixes}))


def _page(
    request: HttpRequest,
    form: ImportUploadForm,
    *,
    job: ImportUpload | None = None,
    status: int = 200,
    upload_error: str = "",
) -> HttpResponse:
    context: ImportPageContext = {
        "form": form,
        "upload_error": upload_error,
        "job": job,
        "uploads": import_uploads_recent(limit=50),
        "accept": _accept_attribute(),
        "upload_limit": settings.LEPUS_MAX_UPLOAD_BYTES,
    }
    template = "annotation/data/import_detail.html" if job else "annotation/data/imports.html"
    return render(request, template, context, status=status)


@require_http_methods(["GET", "POST"])
@curator_required
def import_page(request: HttpRequest) -> HttpResponse:
    if request.method == "GET":
        return _page(request, ImportUploadForm())
    # Refused before Django reads the body, so an oversize file is never spooled to disk.
    if upload_declared_too_large(request.META.get("CONTENT_LENGTH")):
        limit = settings.LEPUS_MAX_UPLOAD_BYTES
        message = f"The file is over the upload limit of {limit} bytes (LEPUS_MAX_UPLOAD_BYTES)."
        return _page(request, ImportUploadForm(), status=413, upload_error=message)
    form = ImportUploadForm(request.POST, request.FILES)
    if form.is_valid():
        data = form.cleaned_data
        try:
            job = import_upload_create(
                kind=data["kind"],
                upload=data["file"],
                user=request.user,
                campaign_slug=data["campaign"] or "",
                file_format=data["file_format"] or "",
            )
        except UploadRefused as error:
            form.add_error(error.field if error.field in form.fields else None, error.message)
        else:
            return redirect("annotation:import-detail", job_id=job.pk)
    return _page(request, form, status=400)


@require_GET
@curator_required
def import_detail_page(request: HttpRequest, job_id: int) -> HttpResponse:
    job = get_object_or_404(ImportUpload.objects.select_related("requested_by"), pk=job_id)
    # The form to upload a corrected file, set to the same kind and campaign.
    form = ImportUploadForm(
        initial={"kind": job.kind, "campaign": job.campaign_slug, "file_format": job.file_format}
    )
    return _page(request, form, job=job)


@require_POST
@curator_required
def import_retry(request: HttpRequest, job_id: int) -> HttpResponse:
    try:
        job = import_upload_retry(job_id=job_id)
    except ImportUpload.DoesNotExist:
        messages.error(request, f"There is no import {job_id}.")
        return redirect("annotation:imports")
    except ValueError as error:
        messages.error(request, str(error))
    else:
        messages.success(request, f"Import {job.pk} is queued again.")
    return redirect("annotation:import-detail", job_id=job_id)
