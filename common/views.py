"""Serving locally stored media behind signed, expiring URLs (S3 serves its own presigned URLs)."""

from __future__ import annotations

import mimetypes
import os
import re
from pathlib import Path

from django.http import (
    FileResponse,
    Http404,
    HttpRequest,
    HttpResponse,
    HttpResponseRedirect,
    JsonResponse,
)
from django.http.response import HttpResponseBase
from django.views.decorators.http import require_http_methods

from common import storage

_RANGE = re.compile(r"^bytes=(\d*)-(\d*)$")


@require_http_methods(["GET", "HEAD"])
def signed_media(request: HttpRequest, key: str) -> HttpResponseBase:
    """Serve a stored file if the URL's signature is valid and unexpired; honour byte ranges so
    browsers can seek in videos."""
    if storage.uses_s3():
        raise Http404("media is served from S3")
    try:
        key = storage.normalise_key(key)
    except ValueError as error:
        raise Http404("invalid key") from error
    if not storage.verify_local_signature(key, request.GET.get("e", ""), request.GET.get("s", "")):
        return HttpResponse("This media link is invalid or has expired.", status=403)
    path = Path(storage.get_storage().path(key))
    if not path.is_file():
        raise Http404("no such media")
    size = path.stat().st_size
    content_type = mimetypes.guess_type(path.name)[0] or "application/octet-stream"
    download_name = request.GET.get("download")
    match = _RANGE.match(request.headers.get("Range", ""))
    response: HttpResponseBase
    if match and (match.group(1) or match.group(2)):
        start_text, end_text = match.groups()
        if start_text:
            start = int(start_text)
            end = min(int(end_text), size - 1) if end_text else size - 1
        else:  # suffix range: the last N bytes
            start = max(0, size - int(end_text))
            end = size - 1
        if start > end or start >= size:
            response = HttpResponse(status=416)
            response["Content-Range"] = f"bytes */{size}"
            return response
        with open(path, "rb") as handle:
            handle.seek(start)
            body = handle.read(end - start + 1)
        response = HttpResponse(body, status=206, content_type=content_type)
        response["Content-Range"] = f"bytes {start}-{end}/{size}"
    else:
        response = FileResponse(
            open(path, "rb"),  # noqa: SIM115 - FileResponse closes it
            content_type=content_type,
            as_attachment=bool(download_name),
            filename=os.path.basename(download_name) if download_name else "",
        )
        response["Content-Length"] = str(size)
    response["Accept-Ranges"] = "bytes"
    response["Cache-Control"] = "private, max-age=300"
    return response


def healthz(request: HttpRequest) -> JsonResponse:
    """Liveness and database readiness for load balancers."""
    from django.db import connection

    try:
        with connection.cursor() as cursor:
            cursor.execute("SELECT 1")
        database = "ok"
    except Exception:  # any driver error means "not ready"
        database = "unavailable"
    status = 200 if database == "ok" else 503
    return JsonResponse(
        {"status": "ok" if status == 200 else "degraded", "database": database}, status=status
    )


@require_http_methods(["GET", "HEAD"])
def favicon(request: HttpRequest) -> HttpResponse:
    """Browsers ask for /favicon.ico whatever the page links; send them to the static icon (its
    hashed name in production, so the redirect itself is cached only for a day)."""
    from django.templatetags.static import static

    response = HttpResponseRedirect(static("favicon.ico"))
    response["Cache-Control"] = "public, max-age=86400"
    return response
