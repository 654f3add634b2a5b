"""The Data page of the dashboard (/dashboard/datasets/): imports, totals, clips by video status,
video jobs; the import page (/dashboard/datasets/imports/); and the data browser under it
(tables of clips, candidates, judgments and workers, the clip and candidate pages)."""

from __future__ import annotations

from django.urls import URLPattern, URLResolver, path

from annotation.views import browse, data, imports

urlpatterns: list[URLPattern | URLResolver] = [
    path("datasets/", data.data_page, name="data"),
    path("datasets/video-jobs/<int:job_id>/retry", data.video_job_retry, name="video-job-retry"),
    # Upload a file to import; follow its job (progress, result or refusal).
    path("datasets/imports/", imports.import_page, name="imports"),
    path("datasets/imports/<int:job_id>/", imports.import_detail_page, name="import-detail"),
    path("datasets/imports/<int:job_id>/retry", imports.import_retry, name="import-retry"),
    path("datasets/clips/", browse.browse_clips, name="browse-clips"),
    path("datasets/clips/<int:clip_id>/", browse.browse_clip, name="browse-clip"),
    path("datasets/candidates/", browse.browse_candidates, name="browse-candidates"),
    path("datasets/candidates/<int:item_id>/", browse.browse_candidate, name="browse-candidate"),
    path("datasets/judgments/", browse.browse_judgments, name="browse-judgments"),
    path("datasets/workers/", browse.browse_workers, name="browse-workers"),
]
