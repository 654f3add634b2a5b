"""The serializer of a campaign's figures (`annotation.figures.CampaignFigures`), shared by the
campaigns API and the quality summary, so both answer the same object under the same names
(docs/figures.md defines them)."""

from __future__ import annotations

from rest_framework import serializers


class CampaignFiguresSerializer(serializers.Serializer):
    candidates = serializers.IntegerField(
        read_only=True, help_text="Candidates of the campaign (control items left out)."
    )
    control_items = serializers.IntegerField(
        read_only=True, help_text="Control items (known answers that check workers)."
    )
    candidates_dropped = serializers.IntegerField(
        read_only=True, help_text="Candidates an expert dropped from releases."
    )
    candidates_in_play = serializers.IntegerField(
        read_only=True, help_text="candidates - candidates_dropped."
    )
    candidates_complete = serializers.IntegerField(
        read_only=True,
        help_text="Candidates in play with a kept judgment in every slot, or resolved in review.",
    )
    percent_complete = serializers.FloatField(
        read_only=True, help_text="100 × candidates_complete / candidates_in_play, one decimal."
    )
    slots_total = serializers.IntegerField(
        read_only=True, help_text="Judgments asked for: the quotas of the candidates in play."
    )
    slots_filled = serializers.IntegerField(
        read_only=True, help_text="Slots holding a kept judgment (at most the quota a candidate)."
    )
    slots_in_progress = serializers.IntegerField(
        read_only=True, help_text="Slots leased to a worker who has not submitted yet."
    )
    percent_filled = serializers.FloatField(
        read_only=True, help_text="100 × slots_filled / slots_total, one decimal."
    )
    judgments = serializers.IntegerField(
        read_only=True, help_text="Judgments received (control items left out)."
    )
    judgments_kept = serializers.IntegerField(
        read_only=True, help_text="Judgments not excluded by quality control or review."
    )
    judgments_excluded = serializers.IntegerField(
        read_only=True, help_text="Judgments excluded by quality control or review."
    )
    judgments_needed = serializers.IntegerField(
        read_only=True, help_text="Kept judgments still needed: slots_total - slots_filled."
    )
