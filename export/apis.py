"""REST API of releases (curators only): list, create, detail, compare, re-run, cancel.

Each view validates, calls one service or selector and serialises the result.
"""

from __future__ import annotations

from collections.abc import Callable

from django.core.exceptions import ValidationError as DjangoValidationError
from django.shortcuts import get_object_or_404
from drf_spectacular.utils import (
    OpenApiParameter,
    OpenApiResponse,
    extend_schema,
    extend_schema_field,
    extend_schema_view,
    inline_serializer,
)
from rest_framework import serializers, status
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from annotation.models import Campaign
from common.api import ErrorSerializer, FieldErrorsSerializer, validated
from common.models import JobStatus
from common.routes import route
from export.licences import DEFAULT_JUDGMENT_LICENSE, JudgmentLicense
from export.models import Release
from export.selectors import ReleaseFile, release_compare, release_files, release_list
from export.services import (
    DEFAULT_RATIOS,
    DEFAULT_SEED,
    release_cancel,
    release_create,
    release_rerun,
)


class ReleaseFileSerializer(serializers.Serializer):
    path = serializers.CharField()
    sha256 = serializers.CharField()
    format = serializers.CharField()
    url = serializers.CharField(allow_null=True, help_text="Short-lived download URL.")


class ReleaseSerializer(serializers.ModelSerializer):
    campaigns: serializers.Field = serializers.SlugRelatedField(
        many=True, read_only=True, slug_field="slug"
    )
    created_by = serializers.CharField(
        source="created_by.username", default=None, read_only=True, allow_null=True
    )
    previous: serializers.Field = serializers.PrimaryKeyRelatedField(
        read_only=True, allow_null=True
    )
    # Never the server's folder or bucket (Release.location, for the command line): the key
    # relative to the storage root, the same on local disk and S3.
    location = serializers.CharField(
        source="storage_prefix",
        read_only=True,
        help_text="Where the release's files are, relative to the storage root "
        "(`releases/<id>`); download them through the files' `url`.",
    )

    class Meta:
        model = Release
        fields = [
            "id",
            "name",
            "status",
            "progress",
            "progress_message",
            "error",
            "attempts",
            "campaigns",
            "seed",
            "ratios",
            "include_raw_judgments",
            "judgments_license",
            "location",
            "total_bytes",
            "counts",
            "previous",
            "created_by",
            "created_at",
            "started_at",
            "finished_at",
        ]
        read_only_fields = fields


class ReleaseDetailSerializer(ReleaseSerializer):
    files = serializers.SerializerMethodField()

    class Meta(ReleaseSerializer.Meta):
        fields = [*ReleaseSerializer.Meta.fields, "files", "stats", "changes"]
        read_only_fields = fields

    @extend_schema_field(ReleaseFileSerializer(many=True))
    def get_files(self, release: Release) -> list[ReleaseFile]:
        return release_files(release=release)


class ReleaseCreateSerializer(serializers.Serializer):
    campaigns = serializers.ListField(
        child=serializers.SlugField(), min_length=1, max_length=50, help_text="Campaign slugs."
    )
    seed = serializers.IntegerField(default=DEFAULT_SEED, min_value=-(2**63), max_value=2**63 - 1)
    ratios = serializers.ListField(
        child=serializers.FloatField(min_value=0.0, max_value=1.0),
        min_length=2,
        max_length=3,
        default=list(DEFAULT_RATIOS),
        help_text="[train, validation] or [train, validation, test], summing to 1.",
    )
    name = serializers.CharField(max_length=200, required=False, allow_blank=True)
    include_raw_judgments = serializers.BooleanField(default=False)
    judgments_license = serializers.ChoiceField(
        choices=JudgmentLicense.choices,
        default=DEFAULT_JUDGMENT_LICENSE,
        help_text="Licence of the judgments collected with Lepus and of the compilation; "
        "imported sources keep their own (listed in the card).",
    )

    def validate_campaigns(self, slugs: list[str]) -> list[Campaign]:
        found = {campaign.slug: campaign for campaign in Campaign.objects.filter(slug__in=slugs)}
        missing = sorted(set(slugs) - set(found))
        if missing:
            raise serializers.ValidationError(f"unknown campaign(s): {', '.join(missing)}")
        return [found[slug] for slug in dict.fromkeys(slugs)]


CompareSerializer = inline_serializer(
    name="ReleaseComparison",
    fields={
        "release": serializers.IntegerField(),
        "other": serializers.IntegerField(),
        "summary": serializers.DictField(),
        "added": serializers.ListField(child=serializers.DictField()),
        "removed": serializers.ListField(child=serializers.DictField()),
        "largest_changes": serializers.ListField(child=serializers.DictField()),
    },
)
ActionResultSerializer = inline_serializer(
    name="ReleaseActionResult",
    fields={"id": serializers.IntegerField(), "status": serializers.CharField()},
)


@route("releases/", name="releases")
class ReleaseListCreateApi(APIView):
    @extend_schema(
        operation_id="releases_list",
        parameters=[
            OpenApiParameter(
                "status",
                str,
                description="Default: published (succeeded) releases only; `all` or a job status "
                "(queued, running, failed, cancelled) lists builds too.",
                enum=["all", *JobStatus.values],
            )
        ],
        responses={
            200: ReleaseSerializer(many=True),
            400: OpenApiResponse(FieldErrorsSerializer, description="Unknown status."),
        },
    )
    def get(self, request: Request) -> Response:
        requested = request.query_params.get("status") or None
        if requested not in (None, "all", *JobStatus.values):
            return Response({"status": ["unknown status"]}, status=status.HTTP_400_BAD_REQUEST)
        releases = release_list(user=request.user, status=requested)[:200]
        return Response(ReleaseSerializer(releases, many=True).data)

    @extend_schema(
        operation_id="releases_create",
        request=ReleaseCreateSerializer,
        responses={202: ReleaseSerializer},
    )
    def post(self, request: Request) -> Response:
        data = validated(ReleaseCreateSerializer, request)
        try:
            release = release_create(
                campaigns=data["campaigns"],
                seed=data["seed"],
                ratios=data["ratios"],
                name=data.get("name") or None,
                include_raw_judgments=data["include_raw_judgments"],
                judgments_license=data["judgments_license"],
                created_by=request.user,
            )
        except DjangoValidationError as error:
            return Response({"detail": error.messages}, status=status.HTTP_400_BAD_REQUEST)
        return Response(ReleaseSerializer(release).data, status=status.HTTP_202_ACCEPTED)


@route("releases/<int:release_id>/", name="release")
class ReleaseDetailApi(APIView):
    @extend_schema(operation_id="releases_retrieve", responses=ReleaseDetailSerializer)
    def get(self, request: Request, release_id: int) -> Response:
        release = get_object_or_404(release_list(user=request.user, status="all"), pk=release_id)
        return Response(ReleaseDetailSerializer(release).data)


@route("releases/<int:release_id>/compare/<int:other_id>/", name="compare")
class ReleaseCompareApi(APIView):
    @extend_schema(
        operation_id="releases_compare",
        parameters=[
            OpenApiParameter(
                "examples", int, description="How many example candidates per list (0-200)."
            )
        ],
        responses={
            200: CompareSerializer,
            400: OpenApiResponse(FieldErrorsSerializer, description="`examples` not an integer."),
        },
    )
    def get(self, request: Request, release_id: int, other_id: int) -> Response:
        published = release_list(user=request.user)
        release = get_object_or_404(published, pk=release_id)
        other = get_object_or_404(published, pk=other_id)
        try:
            examples = max(0, min(200, int(request.query_params.get("examples", 20))))
        except ValueError:
            return Response(
                {"examples": ["must be an integer"]}, status=status.HTTP_400_BAD_REQUEST
            )
        return Response(release_compare(release=release, other=other, examples=examples))


# Changes the state of one of the caller's releases: its new status, or 409 with `refusal` and the
# status that refused it. (A comment, not a docstring: the schema would take it as a description.)
class _ReleaseActionApi(APIView):
    change: Callable[..., bool]
    refusal: str

    def post(self, request: Request, release_id: int) -> Response:
        release = get_object_or_404(release_list(user=request.user, status="all"), pk=release_id)
        if not self.change(release=release):
            return Response(
                {"detail": f"{self.refusal} (this one is {release.status})"},
                status=status.HTTP_409_CONFLICT,
            )
        release.refresh_from_db()
        return Response({"id": release.pk, "status": release.status})


def _action_schema(
    operation_id: str, conflict: str
) -> Callable[[type[_ReleaseActionApi]], type[_ReleaseActionApi]]:
    return extend_schema_view(
        post=extend_schema(
            operation_id=operation_id,
            request=None,
            responses={
                200: ActionResultSerializer,
                409: OpenApiResponse(ErrorSerializer, description=conflict),
            },
        )
    )


@route("releases/<int:release_id>/rerun/", name="rerun")
@_action_schema("releases_rerun", "Not failed or cancelled.")
class ReleaseRerunApi(_ReleaseActionApi):
    change = staticmethod(release_rerun)
    refusal = "only failed or cancelled releases can be re-run"


@route("releases/<int:release_id>/cancel/", name="cancel")
@_action_schema("releases_cancel", "Not queued or running.")
class ReleaseCancelApi(_ReleaseActionApi):
    change = staticmethod(release_cancel)
    refusal = "only queued or running releases can be cancelled"
