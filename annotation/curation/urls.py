"""The Data page of the dashboard (/dashboard/datasets/): imports, totals, clips by video status,
video jobs; and the data browser under it (tables of clips, candidates, judgments and workers, the
clip and candidate pages); and one worker's page in a campaign. The import page under it belongs
to the imports wing."""

from __future__ import annotations

from django.urls import URLPattern, URLResolver, path

from annotation.curation.views import browse, data, worker

urlpatterns: list[URLPattern | URLResolver] = [
    path("datasets/", data.data_page, name="data"),
    path("datasets/video-jobs/<int:job_id>/retry", data.video_job_retry, name="video-job-retry"),
    path("datasets/clips/", browse.browse_clips, name="browse-clips"),
    path("datasets/clips/<int:clip_id>/", browse.browse_clip, name="browse-clip"),
    path("datasets/candidates/", browse.browse_candidates, name="browse-candidates"),
    path("datasets/candidates/<int:item_id>/", browse.browse_candidate, name="browse-candidate"),
    path("datasets/judgments/", browse.browse_judgments, name="browse-judgments"),
    path("datasets/workers/", browse.browse_workers, name="browse-workers"),
    # One worker in a campaign: QC statistics and their judgments (linked from the workers table
    # of the quality pages and from the data browser).
    path(
        "campaigns/<slug:slug>/workers/<int:participation_id>/",
        worker.worker_detail,
        name="quality-worker",
    ),
]
