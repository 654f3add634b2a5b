"""Test-retest consistency of a campaign: repeats served, repeat pairs, quadratic-weighted kappa
per question and per worker.

Curators only (the DRF default `IsCurator`); one view per operation: validate → service →
serialize."""

from __future__ import annotations

from drf_spectacular.utils import extend_schema
from rest_framework import serializers
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from annotation.quality.api.base import TAG, campaign_or_404
from annotation.quality.consistency import campaign_retest
from common.routes import route


class RetestQuestionSerializer(serializers.Serializer):
    key = serializers.CharField()
    label = serializers.CharField()  # type: ignore[assignment]
    pairs = serializers.IntegerField(help_text="Repeat pairs with both ratings of this question.")
    worker_kappa_mean = serializers.FloatField(
        allow_null=True,
        help_text="Mean over the workers with enough pairs of their own kappa on this question.",
    )
    worker_kappa_median = serializers.FloatField(allow_null=True)
    workers_with_kappa = serializers.IntegerField()
    pooled_kappa = serializers.FloatField(
        allow_null=True,
        help_text="Kappa of the tables pooled across workers: chance is taken from the crowd's "
        "marginals, so differences between workers count as reproduced ratings; not an average "
        "worker's consistency.",
    )
    exact_agreement = serializers.FloatField(allow_null=True)


class RetestWorkerQuestionSerializer(serializers.Serializer):
    label = serializers.CharField()  # type: ignore[assignment]
    kappa = serializers.FloatField(allow_null=True, help_text="Null below min_pairs.")
    exact_agreement = serializers.FloatField(allow_null=True)
    mean_absolute_difference = serializers.FloatField(allow_null=True)


class RetestWorkerSerializer(serializers.Serializer):
    participation_id = serializers.IntegerField()
    platform = serializers.CharField()
    external_id = serializers.CharField()
    pairs = serializers.IntegerField(help_text="Repeated candidates of this worker.")
    enough_pairs = serializers.BooleanField(help_text="pairs >= min_pairs.")
    kappa = serializers.FloatField(
        allow_null=True,
        help_text="Mean of the per-question kappas; null with too few pairs (noise).",
    )
    questions = serializers.DictField(child=RetestWorkerQuestionSerializer())


class RetestSerializer(serializers.Serializer):
    retest_share = serializers.FloatField()
    retest_min_gap = serializers.IntegerField()
    min_pairs = serializers.IntegerField(
        help_text="Pairs a worker needs before a kappa is shown or the rule acts."
    )
    rule_enabled = serializers.BooleanField(help_text="Whether the inconsistent_retest rule is on.")
    rule_min_kappa = serializers.FloatField(allow_null=True)
    repeats_served = serializers.IntegerField()
    repeats_submitted = serializers.IntegerField()
    pairs = serializers.IntegerField()
    workers_with_pairs = serializers.IntegerField()
    workers_with_enough_pairs = serializers.IntegerField()
    worker_kappa_mean = serializers.FloatField(
        allow_null=True,
        help_text="Mean over the workers with enough pairs of their own kappa (itself the mean "
        "of their per-question kappas).",
    )
    worker_kappa_median = serializers.FloatField(allow_null=True)
    workers_with_kappa = serializers.IntegerField()
    pooled_kappa = serializers.FloatField(
        allow_null=True, help_text="Mean over the questions of the pooled kappa."
    )
    questions = RetestQuestionSerializer(many=True)
    workers = RetestWorkerSerializer(many=True)


@route("campaigns/<slug:slug>/quality/retest", name="quality-retest")
class RetestApi(APIView):
    @extend_schema(
        tags=TAG,
        responses={200: RetestSerializer},
        operation_id="quality_retest",
        description="Test-retest (intra-rater) consistency: how well each worker reproduced their "
        "own ratings on unannounced repeats, as quadratic-weighted Cohen's kappa per question "
        "and worker, summarised for the campaign by the mean and median of the workers' own "
        "kappas (a pooled kappa beside them, labelled).",
    )
    def get(self, request: Request, slug: str) -> Response:
        campaign = campaign_or_404(slug)
        return Response(RetestSerializer(campaign_retest(campaign=campaign)).data)
