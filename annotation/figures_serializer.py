"""The serializer of a campaign's figures (`annotation.figures.CampaignFigures`), shared by the
campaigns API and the quality summary, so both answer the same object under the same names
(docs/figures.md defines them)."""

from __future__ import annotations

from typing import Any

from django.urls import reverse
from rest_framework import serializers


def _count(help_text: str) -> serializers.IntegerField:
    return serializers.IntegerField(read_only=True, help_text=help_text)


def _percent(help_text: str) -> serializers.FloatField:
    return serializers.FloatField(read_only=True, help_text=help_text)


class CampaignFiguresSerializer(serializers.Serializer):
    candidates = _count("Candidates of the campaign (control items left out).")
    control_items = _count("Control items (known answers that check workers).")
    candidates_dropped = _count("Candidates an expert dropped from releases.")
    candidates_in_play = _count("candidates - candidates_dropped.")
    candidates_complete = _count(
        "Candidates in play with a kept judgment in every slot, or resolved in review."
    )
    percent_complete = _percent("100 × candidates_complete / candidates_in_play, one decimal.")
    slots_total = _count("Judgments asked for: the quotas of the candidates in play.")
    slots_filled = _count("Slots holding a kept judgment (at most the quota a candidate).")
    slots_in_progress = _count("Slots leased to a worker who has not submitted yet.")
    percent_filled = _percent("100 × slots_filled / slots_total, one decimal.")
    judgments = _count("Judgments received (control items left out).")
    judgments_kept = _count("Judgments not excluded by quality control or review.")
    judgments_excluded = _count("Judgments excluded by quality control or review.")
    judgments_needed = _count("Kept judgments still needed: slots_total - slots_filled.")
    judgments_needed_at_most = _count(
        "Upper bound of the kept judgments still needed: judgments_needed plus, under adaptive "
        "allocation, every slot an unsettled candidate may still open (up to the policy's "
        "maximum); equal to judgments_needed under the fixed policy."
    )


class MetricDisagreementSerializer(serializers.Serializer):
    campaign_candidate_id = serializers.IntegerField()
    clip = serializers.CharField()
    candidate = serializers.CharField()
    metric_score = serializers.FloatField(help_text="The metric's score on the rating scale.")
    crowd_mean = serializers.FloatField(help_text="The mean overall of the kept judgments.")
    difference = serializers.FloatField(help_text="metric_score − crowd_mean.")
    browse_url = serializers.SerializerMethodField(help_text="The candidate in the data browser.")

    def get_browse_url(self, row: Any) -> str:
        return reverse("annotation:browse-candidate", args=[row.campaign_candidate_id])


class MetricAgreementSerializer(serializers.Serializer):
    """`annotation.figures.campaign_metric_agreement`: the campaign metric against the crowd."""

    metric = serializers.CharField(help_text='The campaign\'s metric ("" when none).')
    candidates_scored = serializers.IntegerField(help_text="Candidates with a metric score.")
    pairs = serializers.IntegerField(
        help_text="n: candidates with a metric score and at least one kept judgment."
    )
    kendall_tau = serializers.FloatField(
        allow_null=True, help_text="Kendall's tau-b between metric scores and crowd means."
    )
    reason = serializers.CharField(help_text="Why tau is missing; empty when it is there.")
    disagreements = MetricDisagreementSerializer(
        many=True, help_text="The candidates where they disagree most (largest |difference|)."
    )
