"""The audit log of a campaign's quality decisions, and undo.

Curators only (the DRF default `IsCurator`); one view per operation: validate → service →
serialize."""

from __future__ import annotations

from typing import Any

from django.shortcuts import get_object_or_404
from drf_spectacular.utils import extend_schema
from rest_framework import serializers, status
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from annotation.models import AuditEntry
from annotation.quality.api.base import TAG, campaign_or_404
from annotation.quality.audit_text import audit_sentence_one, audit_sentences
from annotation.quality.review import ReviewError, audit_undo
from annotation.quality.selectors import audit_entries
from common.api import ErrorSerializer, validated
from common.routes import route


class AuditEntrySerializer(serializers.ModelSerializer):
    actor: serializers.SlugRelatedField[Any] = serializers.SlugRelatedField(
        slug_field="username", read_only=True, allow_null=True
    )
    undone = serializers.SerializerMethodField()
    sentence = serializers.SerializerMethodField(
        help_text="The entry in words, as the audit page shows it."
    )

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
            "sentence",
            "undoes",
            "undone",
            "created_at",
        ]

    def get_undone(self, entry: AuditEntry) -> bool:
        return AuditEntry.objects.filter(undoes=entry).exists()

    def get_sentence(self, entry: AuditEntry) -> str:
        sentence = getattr(entry, "sentence", None)
        return sentence if sentence is not None else audit_sentence_one(entry)


@route("campaigns/<slug:slug>/audit", name="audit-list")
class AuditListApi(APIView):
    @extend_schema(
        tags=TAG, responses={200: AuditEntrySerializer(many=True)}, operation_id="audit_list"
    )
    def get(self, request: Request, slug: str) -> Response:
        campaign = campaign_or_404(slug)
        entries = audit_sentences(audit_entries(campaign=campaign))
        return Response(AuditEntrySerializer(entries, many=True).data)


class UndoInputSerializer(serializers.Serializer):
    note = serializers.CharField(max_length=2000, required=False, allow_blank=True, default="")


@route("campaigns/<slug:slug>/audit/<int:entry_id>/undo", name="audit-undo")
class AuditUndoApi(APIView):
    @extend_schema(
        tags=TAG,
        request=UndoInputSerializer,
        responses={200: AuditEntrySerializer, 409: ErrorSerializer},
        operation_id="audit_undo",
    )
    def post(self, request: Request, slug: str, entry_id: int) -> Response:
        campaign = campaign_or_404(slug)
        entry = get_object_or_404(AuditEntry, pk=entry_id, campaign=campaign)
        data = validated(UndoInputSerializer, request)
        try:
            undo = audit_undo(entry=entry, user=request.user, note=data["note"])
        except ReviewError as error:
            return Response({"detail": str(error)}, status=status.HTTP_409_CONFLICT)
        return Response(AuditEntrySerializer(undo).data)
