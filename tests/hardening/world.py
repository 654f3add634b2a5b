"""A small but complete Lepus world for the permission and hostile-input tests: one crowd campaign
with two workers (A and B) who each hold a live assignment, A's submitted judgments, a QC run, a
review item with an audit entry, two published releases, a training run, a score request, a video
job and a stored media file, so that every URL's arguments resolve to real rows."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from django.contrib.auth.models import User
from django.test import Client
from django.utils import timezone

from annotation.models import (
    Assignment,
    AuditEntry,
    CalibrationRun,
    Campaign,
    CampaignCandidate,
    ImportUpload,
    Participation,
    QCRun,
    ReviewAction,
    ReviewItem,
    UploadKind,
)
from common import storage
from common.models import JobStatus
from datasets_app.models import VideoAttachJob
from export.models import Release
from tests.annotation.crowd_factories import all_candidate_ratings, crowd_campaign, crowd_join
from training_bridge.models import ScoreRequest, TrainingRun
from training_bridge.services import training_run_create

NEXT = "/api/v1/worker/assignments/next"
MEDIA_KEY = "clips/matrix/video.mp4"
MEDIA_BYTES = b"not really a video, but bytes to serve"


def submit_url(assignment_id: int) -> str:
    return f"/api/v1/worker/assignments/{assignment_id}/submit"


def worker_client(token: str) -> Client:
    """A worker as the rating page's script talks to the API: a token header, no cookie."""
    return Client(HTTP_AUTHORIZATION=f"Worker {token}")


@dataclass
class World:
    campaign: Campaign
    token_a: str
    token_b: str
    participation_a: Participation
    participation_b: Participation
    submitted_a: Assignment  # A's first assignment, submitted
    live_a: Assignment  # A's second assignment, live
    live_b: Assignment  # B's assignment, live
    offer_submitted_a: dict[str, Any]  # the `next` payload of submitted_a
    offer_a: dict[str, Any]  # the `next` payload of live_a
    offer_b: dict[str, Any]
    qc_run: QCRun
    calibration_run: CalibrationRun
    review_item: ReviewItem
    audit_entry: AuditEntry
    release: Release
    other_release: Release
    training_run: TrainingRun
    score_request: ScoreRequest
    video_job: VideoAttachJob
    import_upload: ImportUpload
    curator: User
    admin: User
    outsider: User


def _offer(client: Client) -> dict[str, Any]:
    response = client.post(NEXT)
    assert response.status_code == 200, response.content
    return response.json()


def _published_release(name: str, campaign: Campaign, seed: int) -> Release:
    release = Release.objects.create(
        name=name, seed=seed, ratios=[0.8, 0.2], status=JobStatus.SUCCEEDED,
        finished_at=timezone.now(),
    )  # fmt: skip
    release.storage_prefix = f"releases/{release.pk}"
    release.save(update_fields=["storage_prefix"])
    release.campaigns.set([campaign])
    return release


def build_world(*, curator: User, admin: User, outsider: User, slug: str = "matrix") -> World:
    campaign = crowd_campaign(clips=4, candidates_per_clip=2, judgments_per_candidate=2, slug=slug)
    token_a, participation_a = crowd_join(campaign, "worker-a")
    token_b, participation_b = crowd_join(campaign, "worker-b")
    client_a, client_b = worker_client(token_a), worker_client(token_b)

    first = _offer(client_a)
    response = client_a.post(
        submit_url(first["assignment_id"]),
        {"ratings": all_candidate_ratings(first, value=4, reason="fine")},
        content_type="application/json",
    )
    assert response.status_code == 201, response.content
    offer_a = _offer(client_a)
    offer_b = _offer(client_b)

    item = CampaignCandidate.objects.filter(campaign=campaign).order_by("pk").first()
    assert item is not None
    review_item = ReviewItem.objects.create(
        campaign=campaign, campaign_candidate=item, rating_range=3, priority=1.0
    )
    audit_entry = AuditEntry.objects.create(
        campaign=campaign,
        review_item=review_item,
        actor=curator,
        action=ReviewAction.SET_RATINGS,
        target=f"candidate:{item.pk}",
        before={"resolution": {}},
        after={"resolution": {"relevance": 5}},
        note="set by the curator",
    )
    qc_run = QCRun.objects.create(campaign=campaign, status=JobStatus.SUCCEEDED)
    calibration_run = CalibrationRun.objects.create(
        campaign=campaign, qc_run=qc_run, status=JobStatus.SUCCEEDED
    )

    release = _published_release("matrix release", campaign, seed=1)
    other_release = _published_release("matrix release 2", campaign, seed=2)
    training_run = training_run_create(release=release, backbone="tiny", start=False)
    score_request = ScoreRequest.objects.create(run=training_run, items=[])
    video_job = VideoAttachJob.objects.create(
        directory="/nonexistent/videos", status=JobStatus.FAILED, error="no such directory"
    )
    import_upload = ImportUpload.objects.create(
        kind=UploadKind.CANDIDATES,
        file_name="candidates.csv",
        storage_key="imports/matrix/candidates.csv",
        status=JobStatus.FAILED,
        error="candidates.csv, line 2: refused",
    )
    storage.put_bytes(MEDIA_KEY, MEDIA_BYTES)

    return World(
        campaign=campaign,
        token_a=token_a,
        token_b=token_b,
        participation_a=participation_a,
        participation_b=participation_b,
        submitted_a=Assignment.objects.get(pk=first["assignment_id"]),
        live_a=Assignment.objects.get(pk=offer_a["assignment_id"]),
        live_b=Assignment.objects.get(pk=offer_b["assignment_id"]),
        offer_submitted_a=first,
        offer_a=offer_a,
        offer_b=offer_b,
        qc_run=qc_run,
        calibration_run=calibration_run,
        review_item=review_item,
        audit_entry=audit_entry,
        release=release,
        other_release=other_release,
        training_run=training_run,
        score_request=score_request,
        video_job=video_job,
        import_upload=import_upload,
        curator=curator,
        admin=admin,
        outsider=outsider,
    )


ROLES = ("anonymous", "outsider", "worker_a", "worker_b", "curator", "admin")


def role_client(world: World, role: str, **client_options: Any) -> Client:
    """The client of one member of the cast: curators, admins and outsiders have a session;
    workers have none and send their token header on every request (pages included)."""
    if role == "worker_a":
        return Client(HTTP_AUTHORIZATION=f"Worker {world.token_a}", **client_options)
    if role == "worker_b":
        return Client(HTTP_AUTHORIZATION=f"Worker {world.token_b}", **client_options)
    client = Client(**client_options)
    user = {"outsider": world.outsider, "curator": world.curator, "admin": world.admin}.get(role)
    if user is not None:
        client.force_login(user)
    return client
