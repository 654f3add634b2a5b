"""Release services: create (and enqueue), build, re-queue and re-run, cancel and verify Vid-Lepus
releases."""

from __future__ import annotations

import json
import logging
import math
import time
from collections.abc import Iterable, Sequence
from datetime import timedelta
from typing import NotRequired, TypedDict

from django.contrib.auth.models import AnonymousUser, User
from django.core.exceptions import ValidationError
from django.db import transaction
from django.utils import timezone

from annotation.models import Campaign
from common import storage, webhooks
from common.broker import enqueue, task_named
from common.jobs import JobCancelled, job_claim, job_finish, job_progress, job_requeue
from common.models import JobStatus
from export.builder import build_release_files
from export.licences import DEFAULT_JUDGMENT_LICENSE, JudgmentLicense
from export.models import Release
from export.publishing import Staging, keys_under, release_prefix, stored_sha256
from export.selectors import release_compare
from export.splitting import DEFAULT_RATIOS

logger = logging.getLogger(__name__)

# `export.tasks.build_release`, sent by name: the task imports this module.
BUILD_RELEASE_TASK = "export.build_release"

DEFAULT_SEED = 0


def release_validate_ratios(ratios: Sequence[float]) -> list[float]:
    """Two (train, validation) or three (train, validation, test) positive shares summing to 1."""
    values = [float(value) for value in ratios]
    if len(values) not in (2, 3):
        raise ValidationError("ratios must have two (train, validation) or three values")
    if any(not math.isfinite(value) or value <= 0 for value in values):
        raise ValidationError("every ratio must be a positive number")
    if abs(sum(values) - 1.0) > 1e-6:
        raise ValidationError(f"ratios must sum to 1 (they sum to {sum(values)!r})")
    return values


def release_default_name(*, campaigns: Sequence[Campaign], seed: int) -> str:
    return f"vid-lepus-{'+'.join(sorted(campaign.slug for campaign in campaigns))}-seed{seed}"[:200]


@transaction.atomic
def release_create(
    *,
    campaigns: Iterable[Campaign],
    seed: int = DEFAULT_SEED,
    ratios: Sequence[float] = DEFAULT_RATIOS,
    name: str | None = None,
    include_raw_judgments: bool = False,
    judgments_license: str = DEFAULT_JUDGMENT_LICENSE,
    created_by: User | AnonymousUser | None = None,
) -> Release:
    """Record a release request and enqueue its build (after commit, on the default queue)."""
    chosen = sorted(
        {campaign.pk: campaign for campaign in campaigns}.values(), key=lambda c: c.slug
    )
    if not chosen:
        raise ValidationError("a release needs at least one campaign")
    if not -(2**63) <= int(seed) < 2**63:
        raise ValidationError("seed must fit in 64 bits")
    values = release_validate_ratios(ratios)
    clean_name = (name or "").strip() or release_default_name(campaigns=chosen, seed=int(seed))
    if len(clean_name) > 200:
        raise ValidationError("name must be at most 200 characters")
    if judgments_license not in JudgmentLicense.values:
        raise ValidationError(f"{judgments_license!r} is not a licence Lepus offers")
    release = Release.objects.create(
        name=clean_name,
        seed=int(seed),
        ratios=values,
        include_raw_judgments=include_raw_judgments,
        judgments_license=judgments_license,
        created_by=created_by if isinstance(created_by, User) else None,
    )
    release.campaigns.set(chosen)
    release.storage_prefix = release_prefix(release.pk)
    release.location = storage.storage_uri(release.storage_prefix)
    release.save(update_fields=["storage_prefix", "location"])
    enqueue(task_named(BUILD_RELEASE_TASK), release.pk)
    return release


def release_previous(*, release: Release) -> Release | None:
    """The latest published release of the same campaigns (else of any shared campaign)."""
    campaign_ids = set(release.campaigns.values_list("pk", flat=True))
    candidates = (
        Release.objects.published()
        .filter(campaigns__in=campaign_ids)
        .exclude(pk=release.pk)
        .distinct()
        .order_by("-finished_at", "-id")
        .prefetch_related("campaigns")
    )
    fallback = None
    for other in candidates[:50]:
        if {campaign.pk for campaign in other.campaigns.all()} == campaign_ids:
            return other
        fallback = fallback or other
    return fallback


def release_build(*, release_id: int, task_id: str = "") -> Release | None:
    """Build a queued release: write its files under a staging prefix, verify, publish, and only
    then mark it succeeded. Returns None when the release was not queued (taken by another worker,
    finished, or cancelled)."""
    release = job_claim(model=Release, job_id=release_id, task_id=task_id)
    if release is None:
        return None
    staging: Staging | None = None

    def progress(fraction: float, message: str) -> None:
        job_progress(job=release, fraction=fraction, message=message)

    try:
        staging = Staging(release_id=release.pk, attempt=release.attempts)
        staging.clear_stale()
        previous = release_previous(release=release)
        output = build_release_files(release=release, root=staging.root, progress=progress)
        progress(0.92, "verifying and publishing the files")
        started = time.perf_counter()
        staging.publish(output.files)
        logger.info("release %s: published in %.2f s", release.pk, time.perf_counter() - started)
        changes = (
            release_compare(release=release, other=previous, examples=0)["summary"]
            if previous
            else None
        )
    except JobCancelled:
        if staging:
            staging.discard()
        job_finish(job=release, status=JobStatus.CANCELLED, error="Cancelled by a curator.")
        return release
    except Exception as error:
        logger.exception("release %s failed", release.pk)
        if staging:
            staging.discard()
        job_finish(job=release, status=JobStatus.FAILED, error=f"{type(error).__name__}: {error}")
        if storage.is_unavailable(error):
            # The task retries such builds with a backoff (`common.tasks.retry_job_after_outage`).
            raise storage.StorageUnavailable(str(error)) from error
        return release
    finished = job_finish(
        job=release,
        status=JobStatus.SUCCEEDED,
        files=output.files,
        total_bytes=output.total_bytes,
        counts=output.counts,
        stats=output.stats,
        changes=changes or {},
        previous=previous,
        storage_prefix=release_prefix(release.pk),
        location=storage.storage_uri(release_prefix(release.pk)),
        progress_message="published",
    )
    if not finished:  # reaped or cancelled while publishing: its files stay unlisted
        logger.warning("release %s was no longer running when it finished", release.pk)
    else:
        webhooks.emit("release.built", {"release_id": release.pk, "name": release.name, "counts": output.counts}, list(release.campaigns.values_list("pk", flat=True)))  # fmt: skip
    return release


def release_requeue(*, release: Release) -> bool:
    """Put a failed or cancelled release back in the queue, its file list cleared (the build
    clears the stale files themselves). Publishes no task: `release_rerun` does, and the build
    task retries itself after a storage outage. False when the release was not failed or
    cancelled."""
    if not job_requeue(job=release):
        return False
    Release.objects.filter(pk=release.pk).update(files={}, total_bytes=0)
    return True


def release_rerun(*, release: Release) -> bool:
    """Queue a failed or cancelled release again and enqueue its build (after commit)."""
    if not release_requeue(release=release):
        return False
    enqueue(task_named(BUILD_RELEASE_TASK), release.pk)
    return True


def releases_enqueue_stale(*, older_than: timedelta, limit: int = 100) -> int:
    """Publish again the builds of releases still queued after `older_than` (the broker was down
    when they were created); returns how many. A duplicate message is harmless: the build claims
    its row with a conditional UPDATE."""
    stale = timezone.now() - older_than
    release_ids = list(
        Release.objects.filter(status=JobStatus.QUEUED, created_at__lt=stale).values_list(
            "pk", flat=True
        )[:limit]
    )
    for release_id in release_ids:
        enqueue(task_named(BUILD_RELEASE_TASK), release_id)
    return len(release_ids)


def release_cancel(*, release: Release) -> bool:
    """Cancel a queued release at once; ask a running build to stop at its next batch."""
    if Release.objects.filter(pk=release.pk, status=JobStatus.QUEUED).update(
        status=JobStatus.CANCELLED, error="Cancelled by a curator."
    ):
        return True
    return bool(
        Release.objects.filter(pk=release.pk, status=JobStatus.RUNNING).update(
            cancel_requested=True
        )
    )


class VerifyMismatch(TypedDict):
    path: str
    problem: str
    expected: NotRequired[str]
    actual: NotRequired[str]


class ReleaseVerification(TypedDict):
    ok: bool
    mismatches: list[VerifyMismatch]


def release_verify(*, release: Release) -> ReleaseVerification:
    """Re-hash a published release's files against the database and manifest.json.

    Mismatches: a file whose sha256 differs, a listed file that is missing, a stored file that is
    not listed, and a manifest whose list disagrees with the database.
    """
    mismatches: list[VerifyMismatch] = []
    if release.status != JobStatus.SUCCEEDED:
        return {
            "ok": False,
            "mismatches": [{"path": "", "problem": f"release is {release.status}, not published"}],
        }
    prefix = release.storage_prefix or release_prefix(release.pk)
    for relative, expected in sorted(release.files.items()):
        actual = stored_sha256(f"{prefix}/{relative}")
        if actual is None:
            mismatches.append({"path": relative, "problem": "missing", "expected": expected})
        elif actual != expected:
            mismatches.append(
                {
                    "path": relative,
                    "problem": "sha256 differs",
                    "expected": expected,
                    "actual": actual,
                }
            )
    present = {key[len(prefix) + 1 :] for key in keys_under(prefix)}
    for relative in sorted(present - set(release.files)):
        mismatches.append({"path": relative, "problem": "unexpected file"})
    if "manifest.json" in present:
        try:
            manifest_files = json.loads(storage.read_bytes(f"{prefix}/manifest.json"))["files"]
        except (ValueError, KeyError, TypeError):
            mismatches.append({"path": "manifest.json", "problem": "unreadable manifest"})
        else:
            listed = {path: sha for path, sha in release.files.items() if path != "manifest.json"}
            if manifest_files != listed:
                mismatches.append(
                    {
                        "path": "manifest.json",
                        "problem": "manifest file list differs from the database",
                    }
                )
    return {"ok": not mismatches, "mismatches": mismatches}
