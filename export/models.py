"""Vid-Lepus releases: a `Release` is a build job and, once it succeeded, an immutable set of files
in storage; `ReleaseRecord` keeps which candidate went to which split with which score, so two
releases can be compared in SQL without reading their files."""

from __future__ import annotations

from typing import TypeVar

from django.db import models
from django.db.models import Q

from annotation.models import Campaign, CampaignCandidate
from common.models import Job, JobQuerySet, JobStatus, user_reference
from datasets_app.models import CandidateCaption, Clip
from export.licences import DEFAULT_JUDGMENT_LICENSE, JudgmentLicense


class ReleaseSplit(models.IntegerChoices):
    TRAIN = 0, "train"
    VALIDATION = 1, "validation"
    TEST = 2, "test"


SPLIT_NAMES: tuple[str, ...] = ("train", "validation", "test")


class ReleaseQuerySet(JobQuerySet):
    def published(self) -> ReleaseQuerySet:
        """Releases whose files are complete and verified: the only ones listed as available."""
        return self.filter(status=JobStatus.SUCCEEDED)


class Release(Job):
    """One build of Vid-Lepus from the finalised candidates of some campaigns.

    The files are written under `releases/_staging/<id>-<attempt>/`, verified, then published to
    `storage_prefix` (`releases/<id>/`); `files` ({relative path: sha256}) is filled only when the
    release succeeded. Build time lives here (created_at/started_at/finished_at), never in a file.
    """

    name = models.CharField(max_length=200)
    campaigns = models.ManyToManyField(Campaign, related_name="releases")
    seed = models.BigIntegerField(default=0)
    # [train, validation] or [train, validation, test]; they sum to 1.
    ratios = models.JSONField(default=list)
    include_raw_judgments = models.BooleanField(default=False)
    # The licence of the judgments collected with Lepus and of the compilation (the curator's
    # choice; each imported source keeps its own: export.licences).
    judgments_license = models.CharField(
        max_length=32, choices=JudgmentLicense.choices, default=DEFAULT_JUDGMENT_LICENSE
    )
    storage_prefix = models.CharField(max_length=300, blank=True, default="")
    location = models.CharField(max_length=1000, blank=True, default="")
    files = models.JSONField(default=dict, blank=True)
    total_bytes = models.BigIntegerField(default=0)
    # {"splits": {"train": {"candidates", "clips"}, ...}, "excluded": {...}, ...}
    counts = models.JSONField(default=dict, blank=True)
    # The dataset card's statistics (the same numbers as manifest.json "statistics").
    stats = models.JSONField(default=dict, blank=True)
    # Summary of what changed since `previous` (computed when the build succeeded).
    changes = models.JSONField(default=dict, blank=True)
    previous = models.ForeignKey(
        "self", null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    created_by = user_reference()

    objects = ReleaseQuerySet.as_manager()  # type: ignore[misc]  # narrows Job.objects

    class Meta(Job.Meta):
        constraints = [
            *Job.Meta.constraints,
            models.CheckConstraint(condition=~Q(name=""), name="release_name_not_empty"),
        ]

    def __str__(self) -> str:
        return f"release {self.pk} ({self.name})"

    @property
    def split_names(self) -> list[str]:
        return list(SPLIT_NAMES[: len(self.ratios)])

    @property
    def is_published(self) -> bool:
        return self.status == JobStatus.SUCCEEDED


_M = TypeVar("_M", bound=models.Model)


def _frozen_reference(to: type[_M]) -> models.ForeignKey[_M, _M]:
    """A record's link to campaign data: no constraint, no index, no reverse accessor, and
    nothing happens to the record when the row goes (see ReleaseRecord)."""
    return models.ForeignKey(
        to, on_delete=models.DO_NOTHING, db_constraint=False, db_index=False, related_name="+"
    )


class ReleaseRecord(models.Model):
    """A candidate of a release: its split and score, for comparisons between releases.

    Written in bulk by the build (hundreds of thousands of rows per release), so the table is kept
    lean: the primary key is (release, campaign candidate) and no foreign key has a database
    constraint (a deferred constraint check per row would cost as much as the insert itself; the
    build writes the rows in the same transaction that reads the release, and the ORM's cascade
    removes them with their release). A release stays comparable after the campaign data it came
    from changed or was deleted.
    """

    pk = models.CompositePrimaryKey("release", "campaign_candidate")
    release = models.ForeignKey(
        Release,
        on_delete=models.CASCADE,
        related_name="records",
        db_constraint=False,
        db_index=False,  # the primary key starts with it
    )
    campaign_candidate = _frozen_reference(CampaignCandidate)
    candidate = _frozen_reference(CandidateCaption)
    clip = _frozen_reference(Clip)
    split = models.PositiveSmallIntegerField(choices=ReleaseSplit.choices)
    overall = models.FloatField()
    training_class = models.PositiveSmallIntegerField(null=True, blank=True)
    kept_judgments = models.PositiveIntegerField(default=0)
