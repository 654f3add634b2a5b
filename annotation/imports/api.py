"""REST API of the import page (curators only): upload a file to import, list the uploads, and
poll one upload's job (status, progress, result or the refusal's file, line and field)."""

from __future__ import annotations

from django.shortcuts import get_object_or_404
from drf_spectacular.utils import OpenApiResponse, extend_schema
from rest_framework import serializers, status
from rest_framework.parsers import MultiPartParser
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from annotation.imports.uploads import (
    UploadRefused,
    import_upload_create,
    upload_declared_too_large,
)
from annotation.models import ImportUpload, UploadKind
from annotation.selectors import import_uploads_recent
from common.api import ErrorSerializer, FieldErrorsSerializer, validated


class RejectionSerializer(serializers.Serializer):
    file = serializers.CharField()
    line = serializers.IntegerField(allow_null=True)
    column = serializers.IntegerField(allow_null=True)
    field = serializers.CharField(allow_null=True)
    message = serializers.CharField()


class ImportUploadSerializer(serializers.ModelSerializer):
    requested_by = serializers.CharField(
        source="requested_by.username", default=None, read_only=True, allow_null=True
    )
    rejection = RejectionSerializer(
        allow_null=True,
        read_only=True,
        source="rejection_or_none",
        help_text="Why the file was refused (the command's file, line and field); null unless "
        "refused. Nothing was written.",
    )
    result = serializers.DictField(
        read_only=True, help_text="The importer's result (rows created and skipped per table)."
    )

    class Meta:
        model = ImportUpload
        fields = [
            "id",
            "kind",
            "file_name",
            "size",
            "campaign_slug",
            "file_format",
            "status",
            "progress",
            "progress_message",
            "error",
            "rejection",
            "result",
            "attempts",
            "requested_by",
            "created_at",
            "started_at",
            "finished_at",
        ]
        read_only_fields = fields


class ImportUploadCreateSerializer(serializers.Serializer):
    kind = serializers.ChoiceField(choices=UploadKind.choices)
    file = serializers.FileField()
    campaign = serializers.CharField(
        max_length=50, required=False, allow_blank=True, help_text="Judgments only: the slug."
    )
    file_format = serializers.ChoiceField(
        choices=[("jsonl", "JSONL"), ("csv", "CSV")],
        required=False,
        allow_blank=True,
        help_text="Candidates or judgments only; default: from the file's extension.",
    )


class ImportUploadListCreateApi(APIView):
    parser_classes = [MultiPartParser]

    @extend_schema(operation_id="imports_list", responses=ImportUploadSerializer(many=True))
    def get(self, request: Request) -> Response:
        return Response(ImportUploadSerializer(import_uploads_recent(limit=100), many=True).data)

    @extend_schema(
        operation_id="imports_create",
        request={"multipart/form-data": ImportUploadCreateSerializer},
        responses={
            202: ImportUploadSerializer,
            400: OpenApiResponse(FieldErrorsSerializer, description="Unacceptable upload."),
            413: OpenApiResponse(ErrorSerializer, description="Over LEPUS_MAX_UPLOAD_BYTES."),
        },
    )
    def post(self, request: Request) -> Response:
        if upload_declared_too_large(request.META.get("CONTENT_LENGTH")):
            return Response(
                {"detail": "The upload is over the size limit (LEPUS_MAX_UPLOAD_BYTES)."},
                status=status.HTTP_413_REQUEST_ENTITY_TOO_LARGE,
            )
        data = validated(ImportUploadCreateSerializer, request)
        try:
            job = import_upload_create(
                kind=data["kind"],
                upload=data["file"],
                user=request.user,
                campaign_slug=data.get("campaign", ""),
                file_format=data.get("file_format", ""),
            )
        except UploadRefused as error:
            return Response({error.field: [error.message]}, status=status.HTTP_400_BAD_REQUEST)
        return Response(ImportUploadSerializer(job).data, status=status.HTTP_202_ACCEPTED)


class ImportUploadDetailApi(APIView):
    @extend_schema(operation_id="imports_retrieve", responses=ImportUploadSerializer)
    def get(self, request: Request, job_id: int) -> Response:
        job = get_object_or_404(ImportUpload, pk=job_id)
        return Response(ImportUploadSerializer(job).data)
