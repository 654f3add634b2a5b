"""Quality summary of a campaign: progress, agreement, histograms, the review counts, the rules and the last QC run.

Curators only (the DRF default `IsCurator`); one view per operation: validate → service →
serialize."""

from __future__ import annotations

from drf_spectacular.utils import extend_schema
from rest_framework import serializers
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from annotation.figures import campaign_agreement_figures, campaign_metric_agreement
from annotation.figures_serializer import CampaignFiguresSerializer, MetricAgreementSerializer
from annotation.models import QCRun
from annotation.quality.api.base import TAG, campaign_or_404
from annotation.quality.api.runs import QCRunSerializer
from annotation.quality.selectors import (
    campaign_histograms,
    campaign_progress,
    campaign_rules,
    review_counts,
    statistic_explanations,
)
from common.routes import route


class DayCountSerializer(serializers.Serializer):
    day = serializers.DateField()
    judgments = serializers.IntegerField()


class CampaignProgressSerializer(serializers.Serializer):
    """The campaign's figures (`annotation.figures`: the same object as the campaigns API's
    `figures`), the judgments per day and the completion estimate."""

    figures = CampaignFiguresSerializer()
    judgments_per_day = DayCountSerializer(many=True)
    recent_judgments_per_day = serializers.FloatField(
        help_text="Crowd judgments a day over the last seven days (controls left out)."
    )
    estimated_completion = serializers.DateField(allow_null=True)
    latest_completion = serializers.DateField(
        allow_null=True,
        help_text="Adaptive allocation: when even every slot the unsettled candidates may still "
        "open (judgments_needed_at_most) would be in, at the same pace; null when no slot may "
        "open beyond the estimate (the fixed policy) or there is no estimate.",
    )
    no_estimate_reason = serializers.CharField(
        help_text="Why there is no estimate (closed, imported, complete, no recent work); empty "
        "when there is one."
    )


class AgreementFigureSerializer(serializers.Serializer):
    alpha_all = serializers.FloatField(allow_null=True, help_text="Every judgment (before QC).")
    alpha_kept = serializers.FloatField(allow_null=True, help_text="Kept judgments (after QC).")
    items = serializers.IntegerField(help_text="Candidates with at least two kept ratings.")
    judgments = serializers.IntegerField()
    computed_at = serializers.DateTimeField(allow_null=True)
    reason = serializers.CharField(help_text="Why an alpha is missing; empty when both are there.")


class HistogramSerializer(serializers.Serializer):
    all = serializers.ListField(child=serializers.IntegerField(), help_text="Counts of 1..5.")
    kept = serializers.ListField(child=serializers.IntegerField(), help_text="Counts of 1..5.")


class QualitySummarySerializer(serializers.Serializer):
    campaign = serializers.CharField()
    progress = CampaignProgressSerializer()
    agreement = serializers.DictField(
        child=AgreementFigureSerializer(), help_text="The last QC run's alpha per question."
    )
    metric_agreement = MetricAgreementSerializer(
        help_text="The campaign metric against the crowd so far (issue 28)."
    )
    histograms = serializers.DictField(child=HistogramSerializer())
    review = serializers.DictField(child=serializers.IntegerField())
    rules = serializers.DictField(child=serializers.DictField())
    statistics = serializers.DictField(
        child=serializers.CharField(), help_text="Plain-words explanation of each statistic."
    )
    last_run = QCRunSerializer(allow_null=True)


@route("campaigns/<slug:slug>/quality", name="quality-summary")
class QualitySummaryApi(APIView):
    @extend_schema(
        tags=TAG, responses={200: QualitySummarySerializer}, operation_id="quality_summary"
    )
    def get(self, request: Request, slug: str) -> Response:
        campaign = campaign_or_404(slug)
        payload = {
            "campaign": campaign.slug,
            "progress": campaign_progress(campaign=campaign),
            "agreement": campaign_agreement_figures(campaign=campaign),
            "metric_agreement": campaign_metric_agreement(campaign=campaign),
            "histograms": campaign_histograms(campaign=campaign),
            "review": review_counts(campaign=campaign),
            "rules": campaign_rules(campaign=campaign),
            "statistics": statistic_explanations(),
            "last_run": QCRun.objects.filter(campaign=campaign).first(),
        }
        return Response(QualitySummarySerializer(payload).data)
