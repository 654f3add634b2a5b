"""Reads of the data browser: one page of each table (keyset, see `pagination.py`) and the detail
of a clip and of a campaign candidate. The worker's detail is the campaign's worker page
(`annotation.curation.views.worker`), which lists the worker's judgments through `judgments_page`.

Every list page is one query for its rows (related rows joined in, per-row counts as correlated
subqueries that PostgreSQL evaluates for the page's rows only, after the LIMIT); no page counts
the whole filtered table, which at 1M judgments alone would cost more than the page.
`bench/data_browser.py` times every page type with 1M judgments.
"""

from __future__ import annotations

from typing import Any

from django.conf import settings
from django.db.models import (
    Count,
    Exists,
    FloatField,
    IntegerField,
    OuterRef,
    Q,
    QuerySet,
    Subquery,
    Value,
)
from django.db.models.functions import Coalesce
from django.utils.module_loading import import_string

from annotation.curation.browse.pagination import Page, Sort, keyset_page
from annotation.figures import candidates_with_judgment_counts
from annotation.models import (
    AuditEntry,
    CampaignCandidate,
    CampaignClip,
    Judgment,
    Participation,
    WorkerExclusion,
)
from common import storage
from datasets_app.models import CandidateCaption, Clip, ReferenceCaption

JUDGMENT_ROW_FIELDS = (
    "created_at",
    "values",
    "reason",
    "server_ms",
    "is_excluded",
    "excluded_by",
    "campaign_candidate",
    "participation",
)


def _count(queryset: QuerySet[Any], *, per: str) -> Coalesce:
    """COUNT(*) of `queryset` (filtered on `per` = OuterRef) for each row of the outer query."""
    counted = queryset.order_by().values(per).annotate(n=Count("pk")).values("n")
    return Coalesce(Subquery(counted, output_field=IntegerField()), 0)


def _questions(campaign: Any) -> list[tuple[str, str]]:
    return [(q["key"], q.get("label") or q["key"]) for q in campaign.questions]


# --- the four tables ---------------------------------------------------------------------------


def clips_page(
    *, filters: dict[str, Any], sort: Sort, descending: bool, after: str, size: int
) -> Page:
    clips = Clip.objects.all()
    if "campaign" in filters:
        clips = clips.filter(
            Exists(CampaignClip.objects.filter(campaign=filters["campaign"], clip=OuterRef("pk")))
        )
    if "clip" in filters:
        clips = clips.filter(vatex_id__startswith=filters["clip"])
    if "system" in filters:
        clips = clips.filter(
            Exists(CandidateCaption.objects.filter(clip=OuterRef("pk"), system=filters["system"]))
        )
    if "status" in filters:
        clips = clips.filter(status=filters["status"])
    if "modality" in filters:
        clips = clips.filter(modality=filters["modality"])
    clips = clips.annotate(
        candidate_count=_count(CandidateCaption.objects.filter(clip=OuterRef("pk")), per="clip"),
        reference_count=_count(ReferenceCaption.objects.filter(clip=OuterRef("pk")), per="clip"),
        campaign_count=_count(CampaignClip.objects.filter(clip=OuterRef("pk")), per="clip"),
    )
    return keyset_page(clips, sort=sort, descending=descending, after=after, size=size)


def _filtered(rows: QuerySet[Any], filters: dict[str, Any], **lookups: str) -> QuerySet[Any]:
    """`rows` narrowed by each given filter: {filter name: ORM lookup} (absent filters pass)."""
    for name, lookup in lookups.items():
        if name in filters:
            rows = rows.filter(**{lookup: filters[name]})
    return rows


def candidates_page(
    *, filters: dict[str, Any], sort: Sort, descending: bool, after: str, size: int
) -> Page:
    items = CampaignCandidate.objects.select_related("campaign", "clip", "candidate__system").defer(
        "campaign__questions",
        "campaign__control_settings",
        "campaign__qc_rules",
        "campaign__selection",
        "campaign__description",
        "campaign__instructions",
    )
    items = _filtered(
        items,
        filters,
        campaign="campaign",
        clip="clip__vatex_id",
        system="candidate__system",
        review="review_state",
        kind="candidate__kind",
    )
    # Candidates without an aggregate sort below every real value, in either direction's end.
    items = items.annotate(
        sort_overall=Coalesce("overall", Value(-1.0), output_field=FloatField()),
        sort_range=Coalesce("rating_range", Value(-1), output_field=IntegerField()),
    )
    items = candidates_with_judgment_counts(items)
    return keyset_page(items, sort=sort, descending=descending, after=after, size=size)


def judgments_page(
    *, filters: dict[str, Any], sort: Sort, descending: bool, after: str, size: int
) -> Page:
    """`filters` as `JudgmentTableForm` cleans them, plus `participation` (the worker page)."""
    # Only the columns a row shows: a campaign row carries four JSON documents, and decoding
    # them for every row of every page was a tenth of the page's time.
    judgments = Judgment.objects.select_related(
        "campaign",
        "campaign_candidate__clip",
        "campaign_candidate__candidate__system",
        "participation__worker",
    ).only(
        *JUDGMENT_ROW_FIELDS,
        "campaign__slug",
        "campaign_candidate__clip__vatex_id",
        "campaign_candidate__candidate__text",
        "campaign_candidate__candidate__system__name",
        "campaign_candidate__candidate__system__version",
        "participation__worker__external_id",
    )
    if "campaign" in filters:
        judgments = judgments.filter(campaign=filters["campaign"])
    if "participation" in filters:
        judgments = judgments.filter(participation=filters["participation"])
    if "clip" in filters:
        clip_id = Clip.objects.filter(vatex_id=filters["clip"]).values_list("pk", flat=True).first()
        judgments = judgments.filter(campaign_candidate__clip_id=clip_id or 0)
    if "system" in filters:
        judgments = judgments.filter(campaign_candidate__candidate__system=filters["system"])
    if "worker" in filters:
        # The ids as a list, not a subquery: with the literal ids PostgreSQL knows the worker has
        # a few hundred judgments and reads them through the participation index; with the
        # subquery it walked the whole table in id order (5 s at 1M judgments).
        participation_ids = list(
            Participation.objects.filter(worker__external_id=filters["worker"]).values_list(
                "pk", flat=True
            )
        )
        judgments = judgments.filter(participation__in=participation_ids)
    if "criterion" in filters:
        key = filters["criterion"]
        if "rating" in filters:
            judgments = judgments.filter(**{f"values__{key}": filters["rating"]})
        else:
            judgments = judgments.filter(values__has_key=key)
    if "state" in filters:
        judgments = judgments.filter(is_excluded=filters["state"] == "excluded")
    return keyset_page(judgments, sort=sort, descending=descending, after=after, size=size)


def workers_page(
    *, filters: dict[str, Any], sort: Sort, descending: bool, after: str, size: int
) -> Page:
    participations = Participation.objects.select_related("worker", "campaign").only(
        "joined_at",
        "last_seen_at",
        "status",
        "assignments_submitted",
        "campaign__slug",
        "worker__external_id",
        "worker__platform",
    )
    participations = _filtered(
        participations,
        filters,
        campaign="campaign",
        worker="worker__external_id__startswith",
        platform="worker__platform",
        status="status",
    )
    page = keyset_page(participations, sort=sort, descending=descending, after=after, size=size)
    # Both counts of the page's workers in one pass over their judgments.
    counts: dict[int, dict[str, Any]] = {
        row["participation"]: dict(row)
        for row in Judgment.objects.filter(participation__in=[p.pk for p in page.rows])
        .order_by()
        .values("participation")
        .annotate(total=Count("pk"), excluded=Count("pk", filter=Q(is_excluded=True)))
    }
    for participation in page.rows:
        row = counts.get(participation.pk, {})
        participation.judgment_count = row.get("total", 0)
        participation.excluded_count = row.get("excluded", 0)
    return page


# --- details -----------------------------------------------------------------------------------


def clip_detail(*, clip_id: int) -> dict[str, Any]:
    """A clip with its video (or still image), its references, and its candidates with every campaign they are in
    (raises Clip.DoesNotExist)."""
    clip = Clip.objects.select_related("import_batch").get(pk=clip_id)
    candidates = list(
        CandidateCaption.objects.filter(clip=clip)
        .select_related("system")
        .order_by("position", "pk")
    )
    items: dict[int, list[CampaignCandidate]] = {}
    for item in candidates_with_judgment_counts(
        CampaignCandidate.objects.filter(clip=clip).select_related("campaign").order_by("pk")
    ):
        items.setdefault(item.candidate_id, []).append(item)
    return {
        "clip": clip,
        "video_url": (
            storage.media_url(clip.video_key) if clip.is_servable and not clip.is_image else None
        ),
        "image_url": storage.media_url(clip.image_key)
        if clip.is_servable and clip.is_image
        else None,
        "poster_url": storage.media_url(clip.poster_key) if clip.poster_key else None,
        "references": list(clip.references.order_by("position")),
        "candidates": [
            {"candidate": candidate, "items": items.get(candidate.pk, [])}
            for candidate in candidates
        ],
        "campaigns": list(
            CampaignClip.objects.filter(clip=clip).select_related("campaign").order_by("pk")
        ),
    }


def candidate_detail(*, campaign_candidate_id: int) -> dict[str, Any]:
    """A candidate in a campaign: its aggregate, every judgment with its exclusion, the review
    item and the audit history of the candidate and its judgments, and the exclusions of the
    workers who judged it (raises CampaignCandidate.DoesNotExist)."""
    item = CampaignCandidate.objects.select_related("campaign", "clip", "candidate__system").get(
        pk=campaign_candidate_id
    )
    questions = _questions(item.campaign)
    judgments = list(
        Judgment.objects.filter(campaign_candidate=item)
        .select_related("participation__worker", "import_batch")
        .order_by("created_at", "pk")
    )
    for judgment in judgments:
        judgment.ordered_values = [  # type: ignore[attr-defined]
            judgment.values.get(key) for key, _ in questions
        ]
    # A missing reverse one-to-one raises an AttributeError subclass: getattr's default applies.
    review_item = getattr(item, "review_item", None)
    targets = [f"candidate:{item.pk}"] + [f"judgment:{judgment.pk}" for judgment in judgments]
    history = Q(target__in=targets)
    if review_item is not None:
        history |= Q(review_item=review_item)
    audit = list(
        AuditEntry.objects.filter(campaign=item.campaign)
        .filter(history)
        .select_related("actor")
        .order_by("created_at", "pk")
    )
    exclusions = list(
        WorkerExclusion.objects.filter(
            participation__in=[judgment.participation_id for judgment in judgments]
        )
        .select_related("participation__worker", "created_by", "reversed_by")
        .order_by("created_at", "pk")
    )
    received = len(judgments)
    kept = sum(1 for judgment in judgments if not judgment.is_excluded)
    return {
        "item": item,
        # Counted from the judgments themselves (what the table below lists); the stored means,
        # overall and class are QC's, so the page says when QC has not seen every judgment yet.
        "received": received,
        "kept": kept,
        "aggregate_stale": (received, kept) != (item.judgments_total, item.kept_judgments),
        "questions": questions,
        "means": [(label, item.means.get(key)) for key, label in questions],
        "resolution": [
            (label, (item.resolution.get("values") or {}).get(key)) for key, label in questions
        ]
        if item.resolution
        else [],
        "judgments": judgments,
        "panels": candidate_panels(campaign_candidate_id=item.pk),
        "review_item": review_item,
        "audit": audit,
        "exclusions": exclusions,
        "calibration": getattr(item, "calibration", None),
    }


def worker_history(*, participation: Participation) -> dict[str, Any]:
    """Every exclusion of a worker in a campaign (reversed ones too) and the worker's other
    campaigns, for the worker page."""
    return {
        "exclusions": list(
            WorkerExclusion.objects.filter(participation=participation)
            .select_related("created_by", "reversed_by")
            .order_by("-created_at", "-pk")
        ),
        "other_participations": list(
            Participation.objects.filter(worker_id=participation.worker_id)
            .exclude(pk=participation.pk)
            .select_related("campaign")
            .order_by("-joined_at")
        ),
    }


def candidate_panels(*, campaign_candidate_id: int) -> list[dict[str, Any]]:
    """Panels that apps above this one add to the candidate page (e.g. training_bridge's judge
    explanations beside the workers' reasons): the functions named in
    `settings.LEPUS_CANDIDATE_PANELS`, wired by the composition root, so this layer imports none
    of them. Each returns None or {"title", "template", ...} (the template renders the panel)."""
    panels = []
    for path in settings.LEPUS_CANDIDATE_PANELS:
        panel = import_string(path)(campaign_candidate_id=campaign_candidate_id)
        if panel is not None:
            panels.append(panel)
    return panels
