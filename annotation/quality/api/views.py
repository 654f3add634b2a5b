"""Curator API of quality control (under /api/v1/campaigns/<slug>/...): statistics, workers and
exclusions, QC runs, agreement, the review queue and its decisions, the audit log, aggregates, the
per-system leaderboard and control items. Curators only (the DRF default `IsCurator`); one view
per operation: validate → service → serialize."""

from __future__ import annotations

from typing import Any

from django.shortcuts import get_object_or_404
from drf_spectacular.utils import OpenApiParameter, OpenApiResponse, extend_schema
from rest_framework import serializers, status
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from annotation.models import (
    AuditEntry,
    Campaign,
    CampaignCandidate,
    Participation,
    QCRun,
    ReviewItem,
    ReviewStatus,
)
from annotation.quality.agreement import campaign_agreement
from annotation.quality.controls import CONTROL_KINDS, controls_generate
from annotation.quality.exclusions import worker_exclude, worker_include
from annotation.quality.review import (
    JudgmentExclusionRequest,
    ReviewError,
    audit_undo,
    review_claim,
    review_claim_next,
    review_release,
    review_resolve,
)
from annotation.quality.run import qc_run_start
from annotation.quality.selectors import (
    WORKER_SORTS,
    agreement_history,
    audit_entries,
    campaign_histograms,
    campaign_progress,
    campaign_rules,
    review_counts,
    review_item_detail,
    review_queue,
    statistic_explanations,
    system_leaderboard,
    worker_rows,
)
from common.api import ErrorSerializer, FieldErrorsSerializer

TAG = ["quality"]


def _campaign(slug: str) -> Campaign:
    return get_object_or_404(Campaign, slug=slug)


# ----------------------------------------------------------------------------------------------
# Summary
# ----------------------------------------------------------------------------------------------


class DayCountSerializer(serializers.Serializer):
    day = serializers.DateField()
    judgments = serializers.IntegerField()


class CampaignProgressSerializer(serializers.Serializer):
    candidates_total = serializers.IntegerField()
    candidates_complete = serializers.IntegerField()
    candidates_dropped = serializers.IntegerField()
    judgments_total = serializers.IntegerField()
    judgments_excluded = serializers.IntegerField()
    judgments_remaining = serializers.IntegerField()
    judgments_per_day = DayCountSerializer(many=True)
    recent_judgments_per_day = serializers.FloatField()
    estimated_completion = serializers.DateField(allow_null=True)
    percent_complete = serializers.FloatField()


class HistogramSerializer(serializers.Serializer):
    all = serializers.ListField(child=serializers.IntegerField(), help_text="Counts of 1..5.")
    kept = serializers.ListField(child=serializers.IntegerField(), help_text="Counts of 1..5.")


class QCRunSerializer(serializers.ModelSerializer):
    campaign: serializers.SlugRelatedField[Campaign] = serializers.SlugRelatedField(
        slug_field="slug", read_only=True
    )
    status = serializers.CharField(
        read_only=True, help_text="queued, running, succeeded, failed or cancelled."
    )

    class Meta:
        model = QCRun
        fields = [
            "id",
            "campaign",
            "status",
            "progress",
            "progress_message",
            "error",
            "summary",
            "created_at",
            "started_at",
            "finished_at",
        ]


class QualitySummarySerializer(serializers.Serializer):
    campaign = serializers.CharField()
    progress = CampaignProgressSerializer()
    histograms = serializers.DictField(child=HistogramSerializer())
    review = serializers.DictField(child=serializers.IntegerField())
    rules = serializers.DictField(child=serializers.DictField())
    statistics = serializers.DictField(
        child=serializers.CharField(), help_text="Plain-words explanation of each statistic."
    )
    last_run = QCRunSerializer(allow_null=True)


class QualitySummaryApi(APIView):
    @extend_schema(
        tags=TAG, responses={200: QualitySummarySerializer}, operation_id="quality_summary"
    )
    def get(self, request: Request, slug: str) -> Response:
        campaign = _campaign(slug)
        payload = {
            "campaign": campaign.slug,
            "progress": campaign_progress(campaign=campaign),
            "histograms": campaign_histograms(campaign=campaign),
            "review": review_counts(campaign=campaign),
            "rules": campaign_rules(campaign=campaign),
            "statistics": statistic_explanations(),
            "last_run": QCRun.objects.filter(campaign=campaign).first(),
        }
        return Response(QualitySummarySerializer(payload).data)


# ----------------------------------------------------------------------------------------------
# Workers
# ----------------------------------------------------------------------------------------------


class FlagSerializer(serializers.Serializer):
    rule = serializers.CharField()
    label = serializers.CharField()  # type: ignore[assignment]  # a field named like Field.label
    action = serializers.ChoiceField(choices=["exclude", "flag"])
    explanation = serializers.CharField()
    numbers = serializers.DictField()
    override = serializers.BooleanField(required=False)


class StandingExclusionSerializer(serializers.Serializer):
    id = serializers.IntegerField()
    rules = serializers.ListField(child=serializers.CharField())
    judgments_excluded = serializers.IntegerField()
    created_at = serializers.DateTimeField()
    by_curator = serializers.BooleanField()


class WorkerRowSerializer(serializers.Serializer):
    participation = serializers.IntegerField()
    worker = serializers.CharField(help_text="External id on the crowd platform.")
    platform = serializers.CharField()
    imported = serializers.BooleanField()
    status = serializers.CharField()
    judgments = serializers.IntegerField()
    median_seconds = serializers.FloatField(allow_null=True)
    speed_vs_campaign = serializers.FloatField(allow_null=True)
    speed_vs_clip_length = serializers.FloatField(allow_null=True)
    uniform_share = serializers.FloatField(allow_null=True)
    rating_variance = serializers.FloatField(allow_null=True)
    control_items = serializers.IntegerField()
    control_accuracy = serializers.FloatField(allow_null=True)
    agreement = serializers.FloatField(allow_null=True)
    flags = FlagSerializer(many=True)
    exclusion = StandingExclusionSerializer(allow_null=True)
    computed_at = serializers.DateTimeField(allow_null=True)


class WorkerListSerializer(serializers.Serializer):
    statistics = serializers.DictField(child=serializers.CharField())
    workers = WorkerRowSerializer(many=True)


class WorkerListApi(APIView):
    @extend_schema(
        tags=TAG,
        parameters=[
            OpenApiParameter("sort", str, enum=sorted(WORKER_SORTS)),
            OpenApiParameter("order", str, enum=["asc", "desc"]),
        ],
        responses={200: WorkerListSerializer},
        operation_id="quality_workers",
    )
    def get(self, request: Request, slug: str) -> Response:
        campaign = _campaign(slug)
        sort = request.query_params.get("sort", "worker")
        rows = worker_rows(
            campaign=campaign,
            sort=sort if sort in WORKER_SORTS else "worker",
            descending=request.query_params.get("order") == "desc",
        )
        return Response(
            WorkerListSerializer({"statistics": statistic_explanations(), "workers": rows}).data
        )


class ExcludeInputSerializer(serializers.Serializer):
    reason = serializers.CharField(max_length=2000, required=False, allow_blank=True, default="")


class ExcludeOutputSerializer(serializers.Serializer):
    participation = serializers.IntegerField()
    status = serializers.CharField()
    judgments_excluded = serializers.IntegerField()


class IncludeInputSerializer(serializers.Serializer):
    note = serializers.CharField(max_length=2000, required=False, allow_blank=True, default="")


class IncludeOutputSerializer(serializers.Serializer):
    participation = serializers.IntegerField()
    status = serializers.CharField()
    judgments_included = serializers.IntegerField()
    judgments_kept_out = serializers.IntegerField(
        help_text="Judgments left excluded because other workers refilled their slots."
    )


def _participation(campaign: Campaign, participation_id: int) -> Participation:
    return get_object_or_404(
        Participation.objects.select_related("worker", "campaign"),
        pk=participation_id,
        campaign=campaign,
    )


class WorkerExcludeApi(APIView):
    @extend_schema(
        tags=TAG,
        request=ExcludeInputSerializer,
        responses={200: ExcludeOutputSerializer, 404: ErrorSerializer},
        operation_id="quality_worker_exclude",
    )
    def post(self, request: Request, slug: str, participation_id: int) -> Response:
        campaign = _campaign(slug)
        participation = _participation(campaign, participation_id)
        data = ExcludeInputSerializer(data=request.data)
        data.is_valid(raise_exception=True)
        outcome = worker_exclude(
            participation=participation, actor=request.user, reason=data.validated_data["reason"]
        )
        participation.refresh_from_db()
        return Response(
            ExcludeOutputSerializer(
                {
                    "participation": participation.pk,
                    "status": participation.status,
                    "judgments_excluded": outcome.judgments_excluded,
                }
            ).data
        )


class WorkerIncludeApi(APIView):
    @extend_schema(
        tags=TAG,
        request=IncludeInputSerializer,
        responses={200: IncludeOutputSerializer, 404: ErrorSerializer},
        operation_id="quality_worker_include",
    )
    def post(self, request: Request, slug: str, participation_id: int) -> Response:
        campaign = _campaign(slug)
        participation = _participation(campaign, participation_id)
        data = IncludeInputSerializer(data=request.data)
        data.is_valid(raise_exception=True)
        outcome = worker_include(
            participation=participation, actor=request.user, note=data.validated_data["note"]
        )
        participation.refresh_from_db()
        return Response(
            IncludeOutputSerializer(
                {
                    "participation": participation.pk,
                    "status": participation.status,
                    "judgments_included": outcome.judgments_included,
                    "judgments_kept_out": outcome.judgments_kept_out,
                }
            ).data
        )


# ----------------------------------------------------------------------------------------------
# QC runs
# ----------------------------------------------------------------------------------------------


class QCRunListApi(APIView):
    @extend_schema(
        tags=TAG, responses={200: QCRunSerializer(many=True)}, operation_id="qc_runs_list"
    )
    def get(self, request: Request, slug: str) -> Response:
        campaign = _campaign(slug)
        runs = QCRun.objects.filter(campaign=campaign).select_related("campaign")[:50]
        return Response(QCRunSerializer(runs, many=True).data)

    @extend_schema(
        tags=TAG,
        request=None,
        responses={202: QCRunSerializer},
        operation_id="qc_runs_start",
        description="Queue a full QC recompute (or return the run already queued or running).",
    )
    def post(self, request: Request, slug: str) -> Response:
        campaign = _campaign(slug)
        run = qc_run_start(campaign=campaign, requested_by=request.user)
        return Response(QCRunSerializer(run).data, status=status.HTTP_202_ACCEPTED)


class QCRunDetailApi(APIView):
    @extend_schema(
        tags=TAG,
        responses={200: QCRunSerializer, 404: ErrorSerializer},
        operation_id="qc_runs_detail",
    )
    def get(self, request: Request, slug: str, run_id: int) -> Response:
        campaign = _campaign(slug)
        run = get_object_or_404(
            QCRun.objects.select_related("campaign"), pk=run_id, campaign=campaign
        )
        return Response(QCRunSerializer(run).data)


# ----------------------------------------------------------------------------------------------
# Agreement
# ----------------------------------------------------------------------------------------------


class AlphaSerializer(serializers.Serializer):
    alpha_all = serializers.FloatField(allow_null=True, help_text="Every judgment (before QC).")
    alpha_kept = serializers.FloatField(allow_null=True, help_text="Kept judgments (after QC).")
    items = serializers.IntegerField(help_text="Candidates with at least two kept ratings.")
    judgments = serializers.IntegerField()


class AlphaPointSerializer(serializers.Serializer):
    computed_at = serializers.DateTimeField()
    alpha_all = serializers.FloatField(allow_null=True)
    alpha_kept = serializers.FloatField(allow_null=True)
    items = serializers.IntegerField()
    judgments = serializers.IntegerField()


class AgreementSerializer(serializers.Serializer):
    questions = serializers.DictField(child=AlphaSerializer())
    history = serializers.DictField(child=AlphaPointSerializer(many=True))


class AgreementApi(APIView):
    @extend_schema(
        tags=TAG,
        responses={200: AgreementSerializer},
        operation_id="quality_agreement",
        description="Krippendorff's alpha (ordinal, 1-5) per question, computed now from item × "
        "value counts, with the stored history.",
    )
    def get(self, request: Request, slug: str) -> Response:
        campaign = _campaign(slug)
        figures = campaign_agreement(campaign=campaign)
        return Response(
            AgreementSerializer(
                {"questions": figures, "history": agreement_history(campaign=campaign)}
            ).data
        )


# ----------------------------------------------------------------------------------------------
# Review
# ----------------------------------------------------------------------------------------------


class ReviewItemSerializer(serializers.ModelSerializer):
    candidate = serializers.IntegerField(source="campaign_candidate_id")
    text = serializers.CharField(source="campaign_candidate.candidate.text")
    clip = serializers.CharField(source="campaign_candidate.clip.vatex_id")
    system = serializers.SerializerMethodField()
    means = serializers.JSONField(source="campaign_candidate.means")
    claimed_by: serializers.SlugRelatedField[Any] = serializers.SlugRelatedField(
        slug_field="username", read_only=True, allow_null=True
    )
    resolved_by: serializers.SlugRelatedField[Any] = serializers.SlugRelatedField(
        slug_field="username", read_only=True, allow_null=True
    )
    status = serializers.CharField(read_only=True, help_text="open, claimed or resolved.")

    class Meta:
        model = ReviewItem
        fields = [
            "id",
            "candidate",
            "text",
            "clip",
            "system",
            "means",
            "status",
            "rating_range",
            "priority",
            "claimed_by",
            "claimed_at",
            "resolved_by",
            "resolved_at",
        ]

    def get_system(self, item: ReviewItem) -> str | None:
        system = item.campaign_candidate.candidate.system
        return str(system) if system else None


class ReviewQueueSerializer(serializers.Serializer):
    open = serializers.IntegerField()
    claimed = serializers.IntegerField()
    resolved = serializers.IntegerField()
    items = ReviewItemSerializer(many=True)


class ReviewQueueApi(APIView):
    @extend_schema(
        tags=TAG,
        parameters=[
            OpenApiParameter("status", str, enum=["waiting", *ReviewStatus.values]),
            OpenApiParameter("limit", int),
            OpenApiParameter("offset", int),
        ],
        responses={200: ReviewQueueSerializer},
        operation_id="review_queue",
    )
    def get(self, request: Request, slug: str) -> Response:
        campaign = _campaign(slug)
        wanted = request.query_params.get("status", "waiting")
        statuses = (
            (wanted,)
            if wanted in ReviewStatus.values
            else (ReviewStatus.OPEN, ReviewStatus.CLAIMED)
        )
        limit = _bounded_int(request.query_params.get("limit"), default=100, high=1000)
        offset = _bounded_int(request.query_params.get("offset"), default=0, high=10**9)
        items = review_queue(campaign=campaign, statuses=statuses)[offset : offset + limit]
        counts = review_counts(campaign=campaign)
        return Response(ReviewQueueSerializer({**counts, "items": items}).data)


def _bounded_int(raw: str | None, *, default: int, high: int) -> int:
    try:
        value = int(raw) if raw is not None else default
    except ValueError:
        value = default
    return max(0, min(value, high))


class ReviewClaimNextApi(APIView):
    @extend_schema(
        tags=TAG,
        request=None,
        responses={200: ReviewItemSerializer, 204: OpenApiResponse(description="Queue empty.")},
        operation_id="review_claim_next",
    )
    def post(self, request: Request, slug: str) -> Response:
        campaign = _campaign(slug)
        item = review_claim_next(campaign=campaign, user=request.user)
        if item is None:
            return Response(status=status.HTTP_204_NO_CONTENT)
        return Response(ReviewItemSerializer(_load_item(campaign, item.pk)).data)


def _load_item(campaign: Campaign, item_id: int) -> ReviewItem:
    return get_object_or_404(
        ReviewItem.objects.select_related(
            "campaign",
            "campaign_candidate__candidate__system",
            "campaign_candidate__clip",
            "claimed_by",
            "resolved_by",
        ),
        pk=item_id,
        campaign=campaign,
    )


class ReviewJudgmentSerializer(serializers.Serializer):
    id = serializers.IntegerField()
    worker = serializers.CharField()
    participation = serializers.IntegerField()
    worker_status = serializers.CharField()
    source = serializers.CharField()  # type: ignore[assignment]  # a field named like Field.source
    values = serializers.DictField(child=serializers.FloatField())
    reason = serializers.CharField(allow_blank=True)
    server_seconds = serializers.FloatField(allow_null=True)
    is_excluded = serializers.BooleanField()
    excluded_by = serializers.CharField(allow_blank=True)
    exclusion_reason = serializers.CharField(allow_blank=True)
    worker_stats = serializers.DictField(allow_null=True)


class AuditEntrySerializer(serializers.ModelSerializer):
    actor: serializers.SlugRelatedField[Any] = serializers.SlugRelatedField(
        slug_field="username", read_only=True, allow_null=True
    )
    undone = serializers.SerializerMethodField()

    class Meta:
        model = AuditEntry
        fields = [
            "id",
            "review_item",
            "actor",
            "action",
            "target",
            "before",
            "after",
            "note",
            "undoes",
            "undone",
            "created_at",
        ]

    def get_undone(self, entry: AuditEntry) -> bool:
        return AuditEntry.objects.filter(undoes=entry).exists()


class ReviewDetailSerializer(serializers.Serializer):
    item = ReviewItemSerializer()
    references = serializers.ListField(child=serializers.CharField())
    aggregate = serializers.DictField()
    judgments = ReviewJudgmentSerializer(many=True)
    audit = AuditEntrySerializer(many=True)


def _detail_payload(item: ReviewItem) -> dict[str, Any]:
    detail = review_item_detail(item=item)
    candidate = detail["candidate_item"]
    return {
        "item": item,
        "references": detail["references"],
        "aggregate": {
            "means": candidate.means,
            "overall": candidate.overall,
            "normalized": candidate.normalized,
            "training_class": candidate.training_class,
            "kept_judgments": candidate.kept_judgments,
            "judgments_total": candidate.judgments_total,
            "is_finalised": candidate.is_finalised,
            "dropped": candidate.dropped,
            "resolution": candidate.resolution,
        },
        "judgments": detail["judgments"],
        "audit": detail["audit"],
    }


class ReviewDetailApi(APIView):
    @extend_schema(
        tags=TAG,
        responses={200: ReviewDetailSerializer, 404: ErrorSerializer},
        operation_id="review_detail",
    )
    def get(self, request: Request, slug: str, item_id: int) -> Response:
        campaign = _campaign(slug)
        item = _load_item(campaign, item_id)
        return Response(ReviewDetailSerializer(_detail_payload(item)).data)


class ReviewClaimApi(APIView):
    @extend_schema(
        tags=TAG,
        request=None,
        responses={200: ReviewItemSerializer, 409: ErrorSerializer},
        operation_id="review_claim",
    )
    def post(self, request: Request, slug: str, item_id: int) -> Response:
        campaign = _campaign(slug)
        item = _load_item(campaign, item_id)
        if not review_claim(item=item, user=request.user):
            return Response(
                {"detail": "Someone else is reviewing this item, or it is resolved."},
                status=status.HTTP_409_CONFLICT,
            )
        return Response(ReviewItemSerializer(_load_item(campaign, item_id)).data)


class ReviewReleaseApi(APIView):
    @extend_schema(
        tags=TAG,
        request=None,
        responses={200: ReviewItemSerializer, 409: ErrorSerializer},
        operation_id="review_release",
    )
    def post(self, request: Request, slug: str, item_id: int) -> Response:
        campaign = _campaign(slug)
        item = _load_item(campaign, item_id)
        if not review_release(item=item, user=request.user):
            return Response(
                {"detail": "You do not hold this item."}, status=status.HTTP_409_CONFLICT
            )
        return Response(ReviewItemSerializer(_load_item(campaign, item_id)).data)


class JudgmentExclusionSerializer(serializers.Serializer):
    judgment_id = serializers.IntegerField()
    reason = serializers.CharField(max_length=2000)


class ResolveInputSerializer(serializers.Serializer):
    ratings = serializers.DictField(
        child=serializers.FloatField(min_value=1, max_value=5),
        required=False,
        default=dict,
        help_text="Final rating per question key (1-5); questions left out keep the mean.",
    )
    exclude = JudgmentExclusionSerializer(many=True, required=False, default=list)
    drop = serializers.BooleanField(required=False, default=False)
    note = serializers.CharField(max_length=2000, required=False, allow_blank=True, default="")


class ReviewResolveApi(APIView):
    @extend_schema(
        tags=TAG,
        request=ResolveInputSerializer,
        responses={
            200: ReviewDetailSerializer,
            400: FieldErrorsSerializer,
            409: ErrorSerializer,
        },
        operation_id="review_resolve",
    )
    def post(self, request: Request, slug: str, item_id: int) -> Response:
        campaign = _campaign(slug)
        item = _load_item(campaign, item_id)
        data = ResolveInputSerializer(data=request.data)
        data.is_valid(raise_exception=True)
        if item.status == ReviewStatus.RESOLVED or (
            item.status == ReviewStatus.CLAIMED and item.claimed_by_id != request.user.pk
        ):
            return Response(
                {"detail": "This item is resolved or held by someone else."},
                status=status.HTTP_409_CONFLICT,
            )
        try:
            review_resolve(
                item=item,
                user=request.user,
                ratings=data.validated_data["ratings"],
                exclude=[
                    JudgmentExclusionRequest(judgment_id=row["judgment_id"], reason=row["reason"])
                    for row in data.validated_data["exclude"]
                ],
                drop=data.validated_data["drop"],
                note=data.validated_data["note"],
            )
        except ReviewError as error:
            return Response({"detail": str(error)}, status=status.HTTP_400_BAD_REQUEST)
        return Response(ReviewDetailSerializer(_detail_payload(_load_item(campaign, item_id))).data)


# ----------------------------------------------------------------------------------------------
# Audit
# ----------------------------------------------------------------------------------------------


class AuditListApi(APIView):
    @extend_schema(
        tags=TAG, responses={200: AuditEntrySerializer(many=True)}, operation_id="audit_list"
    )
    def get(self, request: Request, slug: str) -> Response:
        campaign = _campaign(slug)
        return Response(AuditEntrySerializer(audit_entries(campaign=campaign), many=True).data)


class UndoInputSerializer(serializers.Serializer):
    note = serializers.CharField(max_length=2000, required=False, allow_blank=True, default="")


class AuditUndoApi(APIView):
    @extend_schema(
        tags=TAG,
        request=UndoInputSerializer,
        responses={200: AuditEntrySerializer, 409: ErrorSerializer},
        operation_id="audit_undo",
    )
    def post(self, request: Request, slug: str, entry_id: int) -> Response:
        campaign = _campaign(slug)
        entry = get_object_or_404(AuditEntry, pk=entry_id, campaign=campaign)
        data = UndoInputSerializer(data=request.data)
        data.is_valid(raise_exception=True)
        try:
            undo = audit_undo(entry=entry, user=request.user, note=data.validated_data["note"])
        except ReviewError as error:
            return Response({"detail": str(error)}, status=status.HTTP_409_CONFLICT)
        return Response(AuditEntrySerializer(undo).data)


# ----------------------------------------------------------------------------------------------
# Aggregates and leaderboard
# ----------------------------------------------------------------------------------------------


class AggregateSerializer(serializers.ModelSerializer):
    external_id = serializers.CharField(source="candidate.external_id")
    clip = serializers.CharField(source="clip.vatex_id")
    system = serializers.SerializerMethodField()

    class Meta:
        model = CampaignCandidate
        fields = [
            "id",
            "external_id",
            "clip",
            "system",
            "quota",
            "judgments_total",
            "kept_judgments",
            "means",
            "overall",
            "normalized",
            "training_class",
            "rating_range",
            "is_finalised",
            "finalised_at",
            "review_state",
            "dropped",
        ]

    def get_system(self, item: CampaignCandidate) -> str | None:
        system = item.candidate.system
        return str(system) if system else None


class AggregatePageSerializer(serializers.Serializer):
    count = serializers.IntegerField()
    results = AggregateSerializer(many=True)


class AggregateListApi(APIView):
    @extend_schema(
        tags=TAG,
        parameters=[
            OpenApiParameter("finalised", bool),
            OpenApiParameter("limit", int),
            OpenApiParameter("offset", int),
        ],
        responses={200: AggregatePageSerializer},
        operation_id="aggregates_list",
        description="Per-candidate aggregates (control items left out).",
    )
    def get(self, request: Request, slug: str) -> Response:
        campaign = _campaign(slug)
        items = (
            CampaignCandidate.objects.filter(campaign=campaign, is_control=False)
            .select_related("candidate__system", "clip")
            .order_by("id")
        )
        if request.query_params.get("finalised") in ("1", "true", "yes"):
            items = items.filter(is_finalised=True)
        limit = _bounded_int(request.query_params.get("limit"), default=100, high=1000)
        offset = _bounded_int(request.query_params.get("offset"), default=0, high=10**9)
        return Response(
            AggregatePageSerializer(
                {"count": items.count(), "results": items[offset : offset + limit]}
            ).data
        )


class LeaderboardRowSerializer(serializers.Serializer):
    system = serializers.CharField()
    candidates = serializers.IntegerField()
    finalised = serializers.IntegerField()
    overall = serializers.FloatField(allow_null=True)
    normalized = serializers.FloatField(allow_null=True)
    questions = serializers.DictField(child=serializers.FloatField(allow_null=True))


class LeaderboardApi(APIView):
    @extend_schema(
        tags=TAG,
        parameters=[
            OpenApiParameter("sort", str),
            OpenApiParameter("order", str, enum=["asc", "desc"]),
        ],
        responses={200: LeaderboardRowSerializer(many=True)},
        operation_id="leaderboard",
    )
    def get(self, request: Request, slug: str) -> Response:
        campaign = _campaign(slug)
        board = system_leaderboard(
            campaign=campaign,
            sort=request.query_params.get("sort", "overall"),
            descending=request.query_params.get("order", "desc") == "desc",
        )
        return Response(LeaderboardRowSerializer(board, many=True).data)


# ----------------------------------------------------------------------------------------------
# Controls
# ----------------------------------------------------------------------------------------------


class ControlsInputSerializer(serializers.Serializer):
    rate = serializers.FloatField(min_value=0, max_value=1, help_text="Share of clips with one.")
    seed = serializers.IntegerField(required=False, default=0)
    kinds = serializers.ListField(
        child=serializers.ChoiceField(choices=list(CONTROL_KINDS)),
        required=False,
        default=list(CONTROL_KINDS),
        allow_empty=False,
    )


class ControlsOutputSerializer(serializers.Serializer):
    created = serializers.IntegerField()
    controls = serializers.IntegerField(help_text="Control items in the campaign now.")


class ControlsApi(APIView):
    @extend_schema(
        tags=TAG,
        request=ControlsInputSerializer,
        responses={201: ControlsOutputSerializer, 400: FieldErrorsSerializer},
        operation_id="controls_generate",
    )
    def post(self, request: Request, slug: str) -> Response:
        campaign = _campaign(slug)
        data = ControlsInputSerializer(data=request.data)
        data.is_valid(raise_exception=True)
        created = controls_generate(
            campaign=campaign,
            rate=data.validated_data["rate"],
            seed=data.validated_data["seed"],
            kinds=data.validated_data["kinds"],
        )
        total = CampaignCandidate.objects.filter(campaign=campaign, is_control=True).count()
        return Response(
            ControlsOutputSerializer({"created": created, "controls": total}).data,
            status=status.HTTP_201_CREATED,
        )
