"""Worker API (fixed contract, see docs/crowd-flow.md): join, next, submit, me.

Hot path: `next` and `submit` authenticate with one indexed query (token hash → participation with
its campaign), then run one short transaction in the services; bodies are built as plain dicts (the
serializers below document them in the OpenAPI schema).
"""

from __future__ import annotations

from typing import Any, cast

from django.conf import settings
from django.shortcuts import get_object_or_404
from drf_spectacular.utils import (
    OpenApiExample,
    OpenApiResponse,
    PolymorphicProxySerializer,
    extend_schema,
)
from rest_framework import serializers, status
from rest_framework.permissions import AllowAny
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from annotation.crowd.auth import IsWorker, ScreenedOut, WorkerTokenAuthentication
from annotation.crowd.services.assignment import assignment_claim_next
from annotation.crowd.services.offers import assignment_offer_payload
from annotation.crowd.services.progress import participation_progress
from annotation.crowd.services.screen_out import screen_out_payload
from annotation.crowd.services.submission import (
    AssignmentNotFound,
    SubmissionInvalid,
    SubmissionRefused,
    SubmissionTooEarly,
    assignment_submit,
)
from annotation.crowd.services.workers import (
    BROWSER_KEY_MAX_CHARS,
    JoinRefused,
    participation_excluded,
    worker_join,
)
from annotation.models import Campaign, Participation
from common.api import (
    ErrorSerializer,
    FailOpenSimpleRateThrottle,
    FieldErrorsSerializer,
    RememberedContentNegotiation,
    validated,
)
from common.routes import route
from common.storage import StorageUnavailable

# --- throttles ---------------------------------------------------------------------------------


class _CrowdThrottle(FailOpenSimpleRateThrottle):
    """Rates from REST_FRAMEWORK["DEFAULT_THROTTLE_RATES"][scope]; per worker when a worker
    token is present (many workers may share one NAT address), else per client address."""

    def get_cache_key(self, request: Request, view: Any) -> str:
        auth = request.auth
        ident = f"p{auth.pk}" if isinstance(auth, Participation) else self.get_ident(request)
        return self.cache_format % {"scope": self.scope, "ident": ident}


class JoinThrottle(_CrowdThrottle):
    scope = "join"


class NextThrottle(_CrowdThrottle):
    scope = "next"


class SubmitThrottle(_CrowdThrottle):
    scope = "submit"


class MeThrottle(_CrowdThrottle):
    scope = "me"


# --- serializers (input validation for join; documentation for the rest) ----------------------


class JoinInputSerializer(serializers.Serializer):
    platform = serializers.ChoiceField(choices=["prolific", "mturk", "invite"])
    external_id = serializers.CharField(
        max_length=200,
        required=False,
        allow_blank=True,
        help_text="PROLIFIC_PID or MTurk workerId; for invites taken from the invite (optional).",
    )
    study_id = serializers.CharField(max_length=200, required=False, allow_blank=True)
    session_id = serializers.CharField(max_length=200, required=False, allow_blank=True)
    assignment_id = serializers.CharField(
        max_length=200, required=False, allow_blank=True, help_text="MTurk assignmentId."
    )
    hit_id = serializers.CharField(max_length=200, required=False, allow_blank=True)
    turk_submit_to = serializers.CharField(max_length=300, required=False, allow_blank=True)
    browser_key = serializers.CharField(
        max_length=BROWSER_KEY_MAX_CHARS,
        required=False,
        allow_blank=True,
        help_text="A random secret of this browser (the rating page keeps one in localStorage). "
        "The first join binds the participation to it; a later join with the same id from a "
        "browser without it gets no token (409, `in_use_elsewhere`).",
    )
    invite_token = serializers.CharField(max_length=2000, required=False, allow_blank=True)

    def validate(self, attrs: dict[str, Any]) -> dict[str, Any]:
        platform = attrs["platform"]
        if platform == "invite" and not attrs.get("invite_token"):
            raise serializers.ValidationError({"invite_token": ["This field is required."]})
        if platform != "invite" and not (attrs.get("external_id") or "").strip():
            raise serializers.ValidationError({"external_id": ["This field is required."]})
        return attrs


class JoinConflictSerializer(serializers.Serializer):
    detail = serializers.CharField()
    state = serializers.ChoiceField(
        choices=["in_use_elsewhere"],
        required=False,
        help_text="Only when another browser holds this id's participation.",
    )


class JoinOutputSerializer(serializers.Serializer):
    worker_token = serializers.CharField()


class LevelSerializer(serializers.Serializer):
    value = serializers.IntegerField()
    label = serializers.CharField()  # type: ignore[assignment]
    description = serializers.CharField()


class QuestionSerializer(serializers.Serializer):
    key = serializers.CharField()
    label = serializers.CharField()  # type: ignore[assignment]
    levels = LevelSerializer(many=True)


class OfferedClipSerializer(serializers.Serializer):
    id = serializers.IntegerField()
    modality = serializers.ChoiceField(
        choices=["video", "image"], help_text="A video clip, or a still image (no watch gate)."
    )
    video_url = serializers.CharField(
        allow_null=True, help_text="Short-lived signed URL of the H.264/AAC MP4; null for an image."
    )
    image_url = serializers.CharField(
        allow_null=True, help_text="Short-lived signed URL of the still image's JPEG; else null."
    )
    poster_url = serializers.CharField(allow_null=True)
    duration = serializers.FloatField(allow_null=True)


class OfferedCandidateSerializer(serializers.Serializer):
    id = serializers.IntegerField()
    text = serializers.CharField()


class NextAssignmentSerializer(serializers.Serializer):
    assignment_id = serializers.IntegerField()
    expires_at = serializers.DateTimeField()
    clip = OfferedClipSerializer()
    references = serializers.ListField(
        child=serializers.CharField(),
        required=False,
        help_text="Absent in reference-free campaigns.",
    )
    candidates = OfferedCandidateSerializer(many=True)
    questions = QuestionSerializer(many=True)


SUBMIT_REQUEST_SCHEMA: dict[str, Any] = {
    "type": "object",
    "required": ["ratings"],
    "additionalProperties": False,
    "properties": {
        "ratings": {
            "type": "array",
            "description": "Exactly one rating per candidate of the assignment. Besides "
            "candidate_id and reason, one integer per question key of the campaign, within "
            "that question's level values.",
            "items": {
                "type": "object",
                "required": ["candidate_id"],
                "properties": {
                    "candidate_id": {"type": "integer"},
                    "reason": {
                        "type": "string",
                        "description": "Required when a rating is at or below the "
                        "campaign's reason_required_at_or_below.",
                    },
                },
                "additionalProperties": {"type": "integer", "minimum": 0, "maximum": 100},
            },
        },
        "client_timing": {
            "type": "object",
            "additionalProperties": False,
            "properties": {
                "active_ms": {"type": "integer", "minimum": 0},
                "video_played_ms": {"type": "integer", "minimum": 0},
            },
        },
    },
}


class SubmitConflictSerializer(serializers.Serializer):
    detail = serializers.CharField()
    retry_after = serializers.IntegerField(
        required=False,
        help_text="Only when submitted too early: seconds until the campaign's minimum time on "
        "the clip has passed (also in the Retry-After header).",
    )


class SubmitResultSerializer(serializers.Serializer):
    assignment_id = serializers.IntegerField()
    status = serializers.CharField()
    judgments = serializers.IntegerField()
    submitted_at = serializers.DateTimeField()


class ProgressSerializer(serializers.Serializer):
    campaign = serializers.CharField()
    state = serializers.ChoiceField(choices=["working", "finished", "no_work", "stopped"])
    assignments_done = serializers.IntegerField()
    remaining_estimate = serializers.IntegerField()
    live_assignment_id = serializers.IntegerField(allow_null=True)
    max_assignments = serializers.IntegerField(allow_null=True)
    completion_code = serializers.CharField(allow_null=True)
    redirect_url = serializers.CharField(allow_null=True)


def _too_large(request: Request) -> Response | None:
    try:
        length = int(request.META.get("CONTENT_LENGTH") or 0)
    except ValueError:
        length = 0
    if length > settings.DATA_UPLOAD_MAX_MEMORY_SIZE:
        return Response(
            {
                "detail": f"Request body too large (at most {settings.DATA_UPLOAD_MAX_MEMORY_SIZE} bytes)."
            },
            status=status.HTTP_413_REQUEST_ENTITY_TOO_LARGE,
        )
    return None


class ScreenOutSerializer(serializers.Serializer):
    detail = serializers.CharField()
    state = serializers.ChoiceField(choices=["screened_out"])
    platform = serializers.CharField()
    screen_out_code = serializers.CharField(
        allow_null=True, help_text="The campaign's screen-out code (none on MTurk)."
    )
    redirect_url = serializers.CharField(
        allow_null=True, help_text="The campaign's screen-out redirect (none on MTurk)."
    )
    instruction = serializers.CharField(
        help_text="What to do now, e.g. return the HIT on MTurk or enter the code on Prolific."
    )


_SCREEN_OUT = OpenApiResponse(
    ScreenOutSerializer,
    description="The worker was excluded by quality control: the campaign's screen-out (from "
    "the first request after the exclusion on; no further clip is handed out).",
)
WORKER_ERRORS = {
    401: OpenApiResponse(ErrorSerializer, description="Missing, unknown or expired worker token."),
    403: _SCREEN_OUT,
    429: OpenApiResponse(ErrorSerializer, description="Throttled."),
}


class _WorkerApi(APIView):
    authentication_classes = [WorkerTokenAuthentication]
    permission_classes = [IsWorker]
    content_negotiation_class = RememberedContentNegotiation


# --- views -------------------------------------------------------------------------------------


@route("campaigns/<slug:slug>/join", name="campaign-join")
class CampaignJoinApi(APIView):
    authentication_classes: list[Any] = []
    permission_classes = [AllowAny]
    throttle_classes = [JoinThrottle]

    @extend_schema(
        operation_id="campaign_join",
        summary="Join a campaign as a crowd worker",
        tags=["worker"],
        request=JoinInputSerializer,
        responses={
            200: JoinOutputSerializer,
            400: OpenApiResponse(FieldErrorsSerializer, description="Invalid body."),
            403: OpenApiResponse(
                PolymorphicProxySerializer(
                    component_name="JoinRefusal",
                    serializers=[ErrorSerializer, ScreenOutSerializer],
                    resource_type_field_name=None,
                ),
                description="Invalid or expired invite, or the link is not the study / HIT the "
                "campaign is bound to, or the person's data in this campaign was erased "
                "(`detail`); or the worker was excluded from this campaign, also after an "
                "erasure (the screen-out, `state` = screened_out).",
            ),
            404: OpenApiResponse(ErrorSerializer, description="No such campaign."),
            409: OpenApiResponse(
                JoinConflictSerializer,
                description="Campaign not open; or the id is already taking part from another "
                "browser (`state` = in_use_elsewhere: no token is given).",
            ),
            429: OpenApiResponse(ErrorSerializer, description="Throttled."),
        },
        examples=[
            OpenApiExample(
                "Prolific",
                value={
                    "platform": "prolific",
                    "external_id": "5f1e2d3c4b5a697887766554",
                    "study_id": "6470a1b2c3d4e5f601234567",
                    "session_id": "a1b2c3d4e5",
                },
                request_only=True,
            ),
            OpenApiExample(
                "Invite", value={"platform": "invite", "invite_token": "..."}, request_only=True
            ),
        ],
    )
    def post(self, request: Request, slug: str) -> Response:
        too_large = _too_large(request)
        if too_large is not None:
            return too_large
        campaign = get_object_or_404(Campaign, slug=slug, is_imported=False)
        data = validated(JoinInputSerializer, request)
        try:
            joined = worker_join(
                campaign=campaign,
                platform=data["platform"],
                external_id=data.get("external_id", ""),
                invite_token=data.get("invite_token", ""),
                browser_key=data.get("browser_key", ""),
                identifiers={
                    key: data[key]
                    for key in (
                        "study_id",
                        "session_id",
                        "assignment_id",
                        "hit_id",
                        "turk_submit_to",
                    )
                    if data.get(key)
                },
            )
        except JoinRefused as refused:
            if refused.body is not None:
                return Response(refused.body, status=refused.status)
            if refused.status == 400 and refused.field:
                return Response({refused.field: [refused.message]}, status=400)
            return Response({"detail": refused.message}, status=refused.status)
        return Response({"worker_token": joined.worker_token}, status=status.HTTP_200_OK)


@route("worker/assignments/next", name="worker-assignment-next")
class AssignmentNextApi(_WorkerApi):
    throttle_classes = [NextThrottle]

    @extend_schema(
        operation_id="worker_assignment_next",
        summary="The worker's next assignment (or the live one again)",
        description="200 with one clip and its candidates that still need judgments; the same "
        "live assignment again while its lease runs; 204 when nothing is left for this worker.",
        tags=["worker"],
        request=None,
        responses={
            200: NextAssignmentSerializer,
            204: OpenApiResponse(description="Nothing left for this worker."),
            503: OpenApiResponse(ErrorSerializer, description="Media storage unreachable."),
            **WORKER_ERRORS,
        },
    )
    def post(self, request: Request) -> Response:
        participation = cast(Participation, request.auth)
        offer = assignment_claim_next(participation=participation)
        if offer is None:
            # Quality control may have excluded the worker after the authentication read the
            # participation (the claim re-checks the status under its lock and hands out
            # nothing): the screen-out, never "nothing left" (the page would end normally).
            if participation_excluded(participation_id=participation.pk):
                raise ScreenedOut(screen_out_payload(participation=participation))
            return Response(status=status.HTTP_204_NO_CONTENT)
        try:
            payload = assignment_offer_payload(offer=offer, campaign=participation.campaign)
        except StorageUnavailable:
            return Response(
                {"detail": "Media storage is unreachable; please retry in a moment."},
                status=status.HTTP_503_SERVICE_UNAVAILABLE,
                headers={"Retry-After": "5"},
            )
        return Response(payload)


@route("worker/assignments/<int:assignment_id>/submit", name="worker-assignment-submit")
class AssignmentSubmitApi(_WorkerApi):
    throttle_classes = [SubmitThrottle]

    @extend_schema(
        operation_id="worker_assignment_submit",
        summary="Submit the ratings of an assignment",
        description="201 stored; 200 an identical repeat (the first result, nothing stored "
        "twice); 400 field errors (nothing stored); 404 unknown or another worker's assignment; "
        "409 already submitted with different ratings, expired and its slots taken, or too "
        "early (less than the campaign's minimum time on the clip since `next` handed it out, "
        "measured by the server; `retry_after` says how long to wait); 403 the worker was "
        "excluded by quality control (the screen-out). `client_timing` is stored as telemetry "
        "only.",
        tags=["worker"],
        request={"application/json": SUBMIT_REQUEST_SCHEMA},
        responses={
            201: SubmitResultSerializer,
            200: SubmitResultSerializer,
            400: OpenApiResponse(FieldErrorsSerializer, description="Field errors."),
            404: OpenApiResponse(ErrorSerializer, description="No such assignment."),
            409: OpenApiResponse(SubmitConflictSerializer, description="Conflict or too early."),
            413: OpenApiResponse(ErrorSerializer, description="Body too large."),
            **WORKER_ERRORS,
        },
        examples=[
            OpenApiExample(
                "Ratings",
                value={
                    "ratings": [
                        {"candidate_id": 17, "descriptiveness": 4, "relevance": 5, "fluency": 5},
                        {
                            "candidate_id": 18,
                            "descriptiveness": 2,
                            "relevance": 1,
                            "fluency": 4,
                            "reason": "Mentions a dog; there is none.",
                        },
                    ],
                    "client_timing": {"active_ms": 41250, "video_played_ms": 10400},
                },
                request_only=True,
            )
        ],
    )
    def post(self, request: Request, assignment_id: int) -> Response:
        too_large = _too_large(request)
        if too_large is not None:
            return too_large
        participation = cast(Participation, request.auth)
        try:
            outcome = assignment_submit(
                participation=participation, assignment_id=assignment_id, body=request.data
            )
        except AssignmentNotFound:
            return Response({"detail": "No such assignment."}, status=status.HTTP_404_NOT_FOUND)
        except SubmissionInvalid as invalid:
            return Response(invalid.errors, status=status.HTTP_400_BAD_REQUEST)
        except SubmissionTooEarly as early:
            return Response(
                {"detail": early.message, "retry_after": early.retry_after},
                status=early.status,
                headers={"Retry-After": str(early.retry_after)},
            )
        except SubmissionRefused as refused:
            return Response({"detail": refused.message}, status=refused.status)
        return Response(
            outcome.result,
            status=status.HTTP_201_CREATED if outcome.created else status.HTTP_200_OK,
        )


@route("worker/me", name="worker-me")
class WorkerMeApi(_WorkerApi):
    throttle_classes = [MeThrottle]

    @extend_schema(
        operation_id="worker_me",
        summary="The worker's progress, and once finished the completion code",
        tags=["worker"],
        responses={200: ProgressSerializer, **WORKER_ERRORS},
    )
    def get(self, request: Request) -> Response:
        return Response(participation_progress(participation=cast(Participation, request.auth)))
