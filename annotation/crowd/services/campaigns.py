"""Creating and editing campaigns, and keeping their slot counters right.

A campaign selects candidates (by import batch, captioning system, clip list, a number of clips, or
all model outputs) and gets one `CampaignCandidate` per candidate (quota = judgments per candidate)
and one `CampaignClip` per clip (`open_slots` = sum of quota − slots_taken of its candidates).

Clips whose video is not ready yet may be part of a campaign: the engine only ever serves clips
that are servable (`Clip.status == ready` with a video), so they join the flow once the video
pipeline has processed them. `--clips N` prefers clips that are already servable.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from django.db import connection, transaction
from django.db.models import (
    Case,
    Count,
    F,
    IntegerField,
    OuterRef,
    Q,
    QuerySet,
    Subquery,
    Sum,
    When,
)
from django.db.models.functions import Coalesce, Greatest

from annotation.crowd.campaign_options import (
    FROZEN_ONCE_RATED,
    OPTION_FIELDS,
    OPTIONS_BY_NAME,
    SLUG_HELP,
    SLUG_PATTERN,
    allocation_clean,
    options_check,
)
from annotation.crowd.services.allocation import initial_quota
from annotation.crowd.services.campaign_metric import (
    campaign_metric_check,
    campaign_metric_score_enqueue,
    campaign_metric_scores_clear,
)
from annotation.crowd.services.campaign_questions import (
    CampaignInvalid,
    questions_clean,
    questions_without_levels,
)
from annotation.models import (
    Campaign,
    CampaignCandidate,
    CampaignClip,
    Judgment,
    JudgmentSource,
)
from annotation.questions import Rubric, default_questions
from datasets_app.models import CandidateCaption, Clip, ClipStatus

# Path segments of the dashboard that a campaign slug may not shadow.
RESERVED_SLUGS = frozenset({"new", "edit", "campaigns", "api", "static", "media", "admin"})
_BATCH = 2000


# --- validation --------------------------------------------------------------------------------


def _options_clean(options: dict[str, Any]) -> dict[str, Any]:
    unknown = sorted(set(options) - set(OPTION_FIELDS))
    if unknown:
        raise CampaignInvalid({name: ["Unknown campaign setting."] for name in unknown})
    clean, errors = options_check(options)
    if errors:
        raise CampaignInvalid(errors)
    return clean


def _allocation_for(allocation: object, *, review_range_threshold: Any) -> Any:
    """The allocation as stored for a campaign with this review threshold (its rules checked
    against it); CampaignInvalid when it breaks them."""
    clean, problem = allocation_clean(allocation, review_range_threshold=review_range_threshold)
    if problem:
        raise CampaignInvalid({"allocation": [problem]})
    return clean


def _allocation_changes(*, campaign: Campaign, changes: dict[str, Any]) -> dict[str, list[str]]:
    """Bring `changes["allocation"]` to its stored form for the campaign's (new) review threshold,
    dropping it when unchanged (a form posts the campaign's own back); a new review threshold
    re-checks the campaign's adaptive policy. Returns the errors found."""
    threshold = changes.get("review_range_threshold", campaign.review_range_threshold)
    if "allocation" not in changes and not (
        campaign.allocation and "review_range_threshold" in changes
    ):
        return {}
    if OPTIONS_BY_NAME["review_range_threshold"].check(threshold)[1]:
        return {}  # the option's own rule reports it
    # The campaign's own policy follows a new review threshold (its stored one is the old).
    own = {
        key: item for key, item in campaign.allocation.items() if key != "review_range_threshold"
    }
    allocation = changes.get("allocation", own)
    clean, problem = allocation_clean(allocation, review_range_threshold=threshold)
    if problem:
        return {"allocation": [problem]}
    if clean == campaign.allocation:
        changes.pop("allocation", None)
    else:
        changes["allocation"] = clean
    return {}


def _quota_problem(quota: object) -> str | None:
    """Judgments per candidate: a whole number (never a text to convert) within its bounds."""
    option = OPTIONS_BY_NAME["judgments_per_candidate"]
    return option.check(quota)[1] if isinstance(quota, int) else option.error


def campaign_slug_clean(slug: str) -> str:
    if not isinstance(slug, str) or not SLUG_PATTERN.match(slug):
        raise CampaignInvalid({"slug": [SLUG_HELP]})
    if slug in RESERVED_SLUGS:
        raise CampaignInvalid({"slug": [f"{slug!r} is reserved."]})
    if Campaign.objects.filter(slug=slug).exists():
        raise CampaignInvalid({"slug": [f"A campaign {slug!r} exists already."]})
    return slug


# --- selection ---------------------------------------------------------------------------------


def candidates_select(
    *,
    import_batch_ids: Iterable[int] | None = None,
    system_names: Iterable[str] | None = None,
    clip_vatex_ids: Iterable[str] | None = None,
    clip_limit: int | None = None,
) -> QuerySet[CandidateCaption]:
    """Model-output candidates matching every given filter (all of them when none is given)."""
    candidates = CandidateCaption.objects.model_outputs()
    if import_batch_ids:
        candidates = candidates.filter(
            Q(import_batch_id__in=list(import_batch_ids))
            | Q(clip__import_batch_id__in=list(import_batch_ids))
        )
    if system_names:
        candidates = candidates.filter(system__name__in=list(system_names))
    if clip_vatex_ids is not None:
        wanted = sorted({vatex_id.strip() for vatex_id in clip_vatex_ids if vatex_id.strip()})
        known = set(Clip.objects.filter(vatex_id__in=wanted).values_list("vatex_id", flat=True))
        unknown = [vatex_id for vatex_id in wanted if vatex_id not in known]
        if unknown:
            shown = ", ".join(unknown[:10]) + (" …" if len(unknown) > 10 else "")
            raise CampaignInvalid({"clips": [f"Unknown clips: {shown}."]})
        candidates = candidates.filter(clip__vatex_id__in=wanted)
    if clip_limit is not None:
        if clip_limit < 1:
            raise CampaignInvalid({"clips": ["At least 1 clip."]})
        # Servable clips first, then by id: a deterministic pick that can start at once.
        clip_ids = list(
            Clip.objects.filter(id__in=candidates.values("clip_id"))
            .annotate(not_ready=Case(When(status=ClipStatus.READY, then=0), default=1))
            .order_by("not_ready", "vatex_id")
            .values_list("id", flat=True)[:clip_limit]
        )
        candidates = candidates.filter(clip_id__in=clip_ids)
    return candidates.order_by("clip_id", "position", "id")


# --- create, update, delete --------------------------------------------------------------------


def campaign_create(
    *,
    slug: str,
    name: str,
    questions: Sequence[Mapping[str, object]] | None = None,
    judgments_per_candidate: int = 3,
    reference_free: bool = False,
    import_batch_ids: Iterable[int] | None = None,
    system_names: Iterable[str] | None = None,
    clip_vatex_ids: Iterable[str] | None = None,
    clip_limit: int | None = None,
    created_by: Any = None,
    **options: Any,
) -> Campaign:
    """Create a campaign over the selected candidates (see `candidates_select`); one transaction.

    `options` are the settings in OPTION_FIELDS (lease, minimum time on a clip, reasons, pay,
    completion code, ...)."""
    slug = campaign_slug_clean(slug)
    clean_name, problem = OPTIONS_BY_NAME["name"].check(name)
    if problem:
        raise CampaignInvalid({"name": [problem]})
    problem = _quota_problem(judgments_per_candidate)
    if problem:
        raise CampaignInvalid({"judgments_per_candidate": [problem]})
    clean_options = _options_clean(options)
    if clean_options.get("allocation"):
        clean_options["allocation"] = _allocation_for(
            clean_options["allocation"],
            review_range_threshold=clean_options.get(
                "review_range_threshold", OPTIONS_BY_NAME["review_range_threshold"].default
            ),
        )
    rubric = clean_options.setdefault("rubric", Rubric.PER_CRITERION)
    clean_questions = questions_clean(
        questions if questions is not None else default_questions(rubric), rubric=rubric
    )
    overall_key = clean_options.get("overall_question_key", "")
    if overall_key and overall_key not in {question["key"] for question in clean_questions}:
        raise CampaignInvalid({"overall_question_key": ["Not one of the question keys."]})
    batch_ids = sorted(set(import_batch_ids or []))
    systems = sorted(set(system_names or []))
    clip_list = sorted(set(clip_vatex_ids)) if clip_vatex_ids is not None else None
    selected = candidates_select(
        import_batch_ids=batch_ids,
        system_names=systems,
        clip_vatex_ids=clip_list,
        clip_limit=clip_limit,
    )
    selection: dict[str, list[int] | list[str] | int | None] = {
        "import_batch_ids": batch_ids,
        "systems": systems,
        "clips": clip_list,
        "clip_limit": clip_limit,
    }
    if clean_options.get("metric"):
        problem = campaign_metric_check(
            metric=clean_options["metric"], clip_ids=selected.values_list("clip_id", flat=True)
        )
        if problem:
            raise CampaignInvalid({"metric": [problem]})
    with transaction.atomic():
        campaign = Campaign.objects.create(
            slug=slug,
            name=clean_name,
            questions=clean_questions,
            judgments_per_candidate=judgments_per_candidate,
            reference_free=bool(reference_free),
            created_by=created_by,
            selection={key: value for key, value in selection.items() if value},
            **clean_options,
        )
        added = campaign_items_add(
            campaign=campaign, candidate_ids=selected.values_list("id", flat=True)
        )
    if added:
        planner_statistics_refresh()
    return campaign


def planner_statistics_refresh() -> None:
    """Refresh PostgreSQL's statistics of the tables the engine's claim query joins.

    Right after a bulk insert (a new campaign, a fresh import) the statistics can be stale enough
    for the planner to scan every clip for every claim (a nested loop over a "1-row" estimate),
    which made `next` take >100 ms on 1,000 clips until autovacuum caught up."""
    with connection.cursor() as cursor:
        cursor.execute(
            f"ANALYZE {CampaignClip._meta.db_table}, {CampaignCandidate._meta.db_table}, "
            f"{Clip._meta.db_table}"
        )


def campaign_items_add(
    *,
    campaign: Campaign,
    candidate_ids: Iterable[int],
    quota: int | None = None,
    is_control: bool = False,
) -> int:
    """Add candidates to a campaign (skipping those already in it) and bring the clip counters up
    to date; returns how many were added. Used at creation and by `controls_generate` (QC) to add
    control items, which then flow through the engine like any candidate."""
    quota = quota or initial_quota(campaign)
    wanted = list(dict.fromkeys(candidate_ids))
    if not wanted:
        return 0
    added = 0
    with transaction.atomic():
        existing = set(
            CampaignCandidate.objects.filter(
                campaign=campaign, candidate_id__in=wanted
            ).values_list("candidate_id", flat=True)
        )
        rows = [
            (candidate_id, clip_id)
            for candidate_id, clip_id in CandidateCaption.objects.filter(id__in=wanted)
            .exclude(id__in=existing)
            .order_by("clip_id", "position", "id")
            .values_list("id", "clip_id")
        ]
        if not rows:
            return 0
        clip_ids = sorted({clip_id for _candidate_id, clip_id in rows})
        # Lock order: clip rows before candidate rows (see services.assignment).
        list(
            CampaignClip.objects.select_for_update()
            .filter(campaign=campaign, clip_id__in=clip_ids)
            .order_by("id")
            .values_list("id", flat=True)
        )
        for start in range(0, len(rows), _BATCH):
            CampaignCandidate.objects.bulk_create(
                [
                    CampaignCandidate(
                        campaign=campaign,
                        candidate_id=candidate_id,
                        clip_id=clip_id,
                        quota=quota,
                        is_control=is_control,
                    )
                    for candidate_id, clip_id in rows[start : start + _BATCH]
                ]
            )
        added = len(rows)
        _clip_counters_rebuild(campaign=campaign, clip_ids=clip_ids)
        if not is_control:  # a control item's score would mean nothing
            campaign_metric_score_enqueue(campaign=campaign)
    return added


def _clip_counters_rebuild(*, campaign: Campaign, clip_ids: list[int] | None = None) -> int:
    """Recompute `CampaignClip.candidates/open_slots` from the candidates (creating missing clip
    rows). The caller holds the clip row locks (or accepts a repair racing live claims)."""
    items = CampaignCandidate.objects.filter(campaign=campaign)
    if clip_ids is not None:
        items = items.filter(clip_id__in=clip_ids)
    sums = {
        row["clip_id"]: (row["count"], row["open"])
        for row in items.values("clip_id").annotate(
            count=Count("id"), open=Sum(F("quota") - F("slots_taken"))
        )
    }
    existing = {
        campaign_clip.clip_id: campaign_clip
        for campaign_clip in CampaignClip.objects.filter(campaign=campaign, clip_id__in=list(sums))
    }
    to_update = []
    to_create = []
    for clip_id, (count, open_slots) in sums.items():
        campaign_clip = existing.get(clip_id)
        if campaign_clip is None:
            to_create.append(
                CampaignClip(
                    campaign=campaign, clip_id=clip_id, candidates=count, open_slots=open_slots
                )
            )
        elif (campaign_clip.candidates, campaign_clip.open_slots) != (count, open_slots):
            campaign_clip.candidates, campaign_clip.open_slots = count, open_slots
            to_update.append(campaign_clip)
    CampaignClip.objects.bulk_create(to_create, batch_size=_BATCH)
    CampaignClip.objects.bulk_update(to_update, ["candidates", "open_slots"], batch_size=_BATCH)
    return len(to_create) + len(to_update)


def campaign_counters_rebuild(*, campaign: Campaign) -> int:
    """Repair every clip counter of a campaign from its candidates, under the clip row locks;
    returns how many clip rows changed."""
    with transaction.atomic():
        list(
            CampaignClip.objects.select_for_update()
            .filter(campaign=campaign)
            .order_by("id")
            .values_list("id", flat=True)
        )
        return _clip_counters_rebuild(campaign=campaign)


def campaign_has_crowd_judgments(*, campaign: Campaign) -> bool:
    return Judgment.objects.filter(campaign=campaign, source=JudgmentSource.CROWD).exists()


def campaign_update(*, campaign: Campaign, **changes: Any) -> Campaign:
    """Change a campaign's settings. Questions, the reference condition and the overall key are
    frozen once crowd judgments exist; a new judgments-per-candidate applies to every non-control
    candidate (never below what is already taken) and the clip counters follow."""
    changes = dict(changes)
    errors: dict[str, list[str]] = {}
    if "slug" in changes and changes.pop("slug") != campaign.slug:
        errors["slug"] = ["The slug cannot change (worker links and invites use it)."]
    if changes.get("rubric") == campaign.rubric:
        del changes["rubric"]  # unchanged (an imported campaign's form posts its own back)
    errors.update(_allocation_changes(campaign=campaign, changes=changes))
    rubric = changes.get("rubric", campaign.rubric)
    rubric_problem = OPTIONS_BY_NAME["rubric"].check(rubric)[1] if "rubric" in changes else None
    if rubric_problem:
        errors["rubric"] = [rubric_problem]  # no levels to give the questions
    elif "questions" in changes or rubric != campaign.rubric:
        # A new rubric gives the questions its levels (a custom one keeps the levels they have).
        questions = changes.get("questions", campaign.questions)
        if "questions" not in changes and rubric != Rubric.CUSTOM:
            questions = questions_without_levels(questions)
        try:
            changes["questions"] = questions_clean(questions, rubric=rubric)
        except CampaignInvalid as invalid:
            errors.update(invalid.errors)
    frozen = [
        name
        for name in FROZEN_ONCE_RATED
        if name in changes and changes[name] != getattr(campaign, name)
    ]
    if frozen and campaign_has_crowd_judgments(campaign=campaign):
        for name in frozen:
            errors[name] = ["Cannot change once workers have submitted judgments."]
    if "name" in changes:
        changes["name"], problem = OPTIONS_BY_NAME["name"].check(changes["name"])
        if problem:
            errors["name"] = [problem]
    quota = changes.pop("judgments_per_candidate", None)
    problem = _quota_problem(quota) if quota is not None else None
    if problem:
        errors["judgments_per_candidate"] = [problem]
    if errors:
        raise CampaignInvalid(errors)
    simple = {key: value for key, value in changes.items() if key not in ("name", "questions")}
    clean = _options_clean({key: value for key, value in simple.items() if key != "reference_free"})
    if "reference_free" in simple:
        clean["reference_free"] = bool(simple["reference_free"])
    for key in ("name", "questions"):
        if key in changes:
            clean[key] = changes[key]
    questions = clean.get("questions", campaign.questions)
    overall_key = clean.get("overall_question_key", campaign.overall_question_key)
    if overall_key and overall_key not in {question["key"] for question in questions}:
        raise CampaignInvalid({"overall_question_key": ["Not one of the question keys."]})
    metric_changed = "metric" in clean and clean["metric"] != campaign.metric
    if metric_changed and clean["metric"]:
        clip_ids = CampaignCandidate.objects.filter(campaign=campaign).values_list("clip_id")
        problem = campaign_metric_check(metric=clean["metric"], clip_ids=(c for (c,) in clip_ids))
        if problem:
            raise CampaignInvalid({"metric": [problem]})

    with transaction.atomic():
        for key, value in clean.items():
            setattr(campaign, key, value)
        if metric_changed:  # another metric's scores are not this one's
            campaign_metric_scores_clear(campaign=campaign)
            campaign_metric_score_enqueue(campaign=campaign)
        quota_changed = quota is not None and quota != campaign.judgments_per_candidate
        if quota is not None:
            campaign.judgments_per_candidate = quota
        _quotas_follow(
            campaign=campaign,
            quota_changed=quota_changed,
            allocation_changed="allocation" in clean,
        )
        campaign.save()
    return campaign


def _quotas_follow(*, campaign: Campaign, quota_changed: bool, allocation_changed: bool) -> None:
    """The non-control candidates' quotas after a settings change (never below what is taken):
    a new judgments-per-candidate moves a fixed campaign's; a new allocation policy (only before
    any crowd judgment: it is frozen after) starts every candidate afresh at its initial quota.
    An adaptive campaign's quotas are the allocation's, whatever judgments-per-candidate says."""
    adaptive = bool(campaign.allocation)
    if not allocation_changed and not (quota_changed and not adaptive):
        return
    list(
        CampaignClip.objects.select_for_update()
        .filter(campaign=campaign)
        .order_by("id")
        .values_list("id", flat=True)
    )
    fresh: dict[str, Any] = {"stop_reason": "", "opened_by": []} if allocation_changed else {}
    CampaignCandidate.objects.filter(campaign=campaign, is_control=False).update(
        quota=Greatest(initial_quota(campaign), F("slots_taken")), **fresh
    )
    _clip_counters_rebuild(campaign=campaign)


def campaign_delete(*, campaign: Campaign) -> None:
    """Delete a campaign nobody has worked on yet; close it instead once workers joined."""
    if campaign.participations.exists() or campaign.judgments.exists():
        raise CampaignInvalid(
            {"campaign": ["Workers have joined this campaign; close it instead of deleting it."]}
        )
    campaign.delete()


def campaign_counts(*, campaign: Campaign) -> dict[str, int]:
    """Candidates, clips, slots (quota total, taken) of a campaign, in one query each."""
    totals = CampaignCandidate.objects.filter(campaign=campaign).aggregate(
        candidates=Count("id"), quota=Sum("quota"), taken=Sum("slots_taken")
    )
    return {
        "candidates": totals["candidates"] or 0,
        "clips": CampaignClip.objects.filter(campaign=campaign).count(),
        "quota": totals["quota"] or 0,
        "slots_taken": totals["taken"] or 0,
    }


def campaigns_with_counts() -> QuerySet[Campaign]:
    """Campaigns annotated with clip_count and participation_count (independent subqueries, so
    the counts never multiply each other). Candidate, slot and judgment figures come from
    `annotation.figures`."""
    from annotation.models import Participation

    def scalar(model: Any, expression: Any) -> Subquery:
        return Subquery(
            model.objects.filter(campaign=OuterRef("pk"))
            .order_by()
            .values("campaign")
            .annotate(value=expression)
            .values("value")[:1],
            output_field=IntegerField(),
        )

    return Campaign.objects.annotate(
        clip_count=Coalesce(scalar(CampaignClip, Count("id")), 0),
        participation_count=Coalesce(scalar(Participation, Count("id")), 0),
    )
