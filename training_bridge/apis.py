"""REST API of training_bridge (curators only, under /api/v1/): start, list, show, cancel and
resume training runs; score (clip, references, candidate) triples with a finished run."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any, TypeVar

from django.conf import settings
from django.core.exceptions import ValidationError as DjangoValidationError
from django.db.models import Model
from django.shortcuts import get_object_or_404
from drf_spectacular.utils import OpenApiParameter, OpenApiResponse, extend_schema
from rest_framework import serializers, status
from rest_framework.exceptions import ValidationError
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from common.api import (
    ErrorSerializer,
    FailOpenScopedRateThrottle,
    FieldErrorsSerializer,
    validated,
)
from common.models import JobStatus
from common.routes import route
from training_bridge import selectors
from training_bridge.metrics.plugins import METRIC_NAMES
from training_bridge.models import (
    RigelEvaluation,
    ScoreRequest,
    TrainingAblation,
    TrainingRun,
    TrainingTrigger,
)
from training_bridge.rigel.config import Ablation
from training_bridge.services import (
    score_request_create,
    training_run_cancel,
    training_run_create,
    training_run_resume,
)
from training_bridge.services.rigel_benchmark import (
    CORRELATIONS,
    PROTOCOL_CHOICES,
    rigel_evaluation_create,
)

MAX_LIST = 100

_F = TypeVar("_F", bound=Callable[..., Any])
_M = TypeVar("_M", bound=Model)


@contextmanager
def _refusals_as_400() -> Iterator[None]:
    """A service's refusal (Django's `ValidationError`) becomes a 400 with its messages."""
    try:
        yield
    except DjangoValidationError as error:
        raise ValidationError({"detail": error.messages}) from error


def _named_row(model: type[_M], field: str, **lookup: Any) -> _M:
    """The row the request body's `field` names, or a 400 on that field ("no such <field>")."""
    row = model._default_manager.filter(**lookup).first()
    if row is None:
        raise ValidationError({field: [f"no such {field}"]})
    return row


# --- serializers ------------------------------------------------------------------------------


class TrainingRunSerializer(serializers.ModelSerializer):
    release = serializers.IntegerField(source="release_id")

    class Meta:
        model = TrainingRun
        fields = [
            "id",
            "name",
            "release",
            "backbone",
            "device",
            "ablation",
            "reference_free",
            "processes",
            "hyperparameters",
            "trigger",
            "status",
            "phase",
            "progress",
            "progress_message",
            "completed_steps",
            "epoch",
            "step",
            "loss",
            "validation_tau",
            "metrics",
            "artifacts",
            "cancel_requested",
            "error",
            "attempts",
            "created_at",
            "started_at",
            "finished_at",
            "heartbeat_at",
        ]
        read_only_fields = fields


class TrainingRunDetailSerializer(TrainingRunSerializer):
    class Meta(TrainingRunSerializer.Meta):
        fields = [
            *TrainingRunSerializer.Meta.fields,
            "history",
            "evaluation",
            "checkpoint",
            "log_tail",
        ]
        read_only_fields = fields


# What a request may name: the stored values and the command line's spellings (kl-loss, ...).
ABLATION_INPUT_CHOICES = [
    *TrainingAblation.choices,
    *((alias, alias) for alias in Ablation.ALIASES),
]


class TrainingRunCreateSerializer(serializers.Serializer):
    release = serializers.IntegerField(min_value=1)
    backbone = serializers.CharField(required=False, allow_blank=True, max_length=500)
    device = serializers.RegexField(r"^(cpu|cuda(:\d+)?)$", required=False, default="cpu")
    ablation = serializers.ChoiceField(
        choices=ABLATION_INPUT_CHOICES,
        default=TrainingAblation.FULL,
    )
    reference_free = serializers.BooleanField(default=False)
    processes = serializers.IntegerField(min_value=1, max_value=64, default=1)
    name = serializers.CharField(required=False, allow_blank=True, max_length=200, default="")
    hyperparameters = serializers.DictField(required=False, default=dict)

    def validate_device(self, value: str) -> str:
        """Only a device the training machine has (`LEPUS_TRAINING_DEVICES` names them when the
        training workers are other machines): a run on a missing GPU would only fail later."""
        from training_bridge.services.machine import training_devices

        offered = training_devices()
        if value.split(":", 1)[0] not in offered:
            raise ValidationError(
                f"{value} is not a device of the training machine, which offers "
                f"{', '.join(offered)}. Set LEPUS_TRAINING_DEVICES when the training workers "
                "are other machines."
            )
        return value


class ScoreItemSerializer(serializers.Serializer):
    clip = serializers.CharField(
        max_length=200, help_text="Clip id (VATEX id) of an ingested clip."
    )
    references = serializers.ListField(
        child=serializers.CharField(max_length=5000),
        required=False,
        allow_null=True,
        max_length=32,
        help_text="Reference captions; omit or null for a reference-free run.",
    )
    candidate = serializers.CharField(max_length=5000)


class ScoreCreateSerializer(serializers.Serializer):
    run = serializers.IntegerField(min_value=1, help_text="A succeeded training run.")
    items = ScoreItemSerializer(many=True, allow_empty=False)
    wait = serializers.IntegerField(
        min_value=0,
        default=0,
        help_text="Seconds to wait for the scores before answering 202 (capped by the server).",
    )


class ScoreRequestSerializer(serializers.ModelSerializer):
    run = serializers.IntegerField(source="run_id")
    scores = serializers.ListField(child=serializers.FloatField(), allow_null=True)

    class Meta:
        model = ScoreRequest
        fields = ["id", "run", "status", "scores", "error", "created_at", "finished_at"]
        read_only_fields = fields

    def to_representation(self, instance: ScoreRequest) -> dict[str, Any]:
        data = super().to_representation(instance)
        if instance.status != JobStatus.SUCCEEDED:
            data["scores"] = None
        return data


# --- training runs ----------------------------------------------------------------------------


@route("training/runs", name="run-list")
class TrainingRunListApi(APIView):
    @extend_schema(
        operation_id="training_runs_list",
        parameters=[
            OpenApiParameter("release", int, description="Only runs on this release."),
            OpenApiParameter("status", str, enum=[s.value for s in JobStatus]),
            OpenApiParameter("limit", int, description=f"At most {MAX_LIST}."),
        ],
        responses={
            200: TrainingRunSerializer(many=True),
            400: OpenApiResponse(ErrorSerializer, description="release or limit not an integer."),
        },
    )
    def get(self, request: Request) -> Response:
        release = request.query_params.get("release")
        limit = request.query_params.get("limit", "50")
        if (release and not release.isdigit()) or not limit.isdigit():
            raise ValidationError({"detail": "release and limit must be integers"})
        runs = selectors.training_run_list(
            release_id=int(release) if release else None,
            status=request.query_params.get("status") or None,
        )[: min(MAX_LIST, int(limit))]
        return Response(TrainingRunSerializer(runs, many=True).data)

    @extend_schema(
        operation_id="training_runs_create",
        request=TrainingRunCreateSerializer,
        responses={201: TrainingRunDetailSerializer},
    )
    def post(self, request: Request) -> Response:
        from export.models import Release

        data = validated(TrainingRunCreateSerializer, request)
        release = _named_row(Release, "release", pk=data["release"])
        with _refusals_as_400():
            run = training_run_create(
                release=release,
                backbone=data.get("backbone") or None,
                device=data["device"],
                ablation=Ablation.canonical(data["ablation"]),
                reference_free=data["reference_free"],
                hyperparameters=data["hyperparameters"],
                processes=data["processes"],
                name=data["name"],
                trigger=TrainingTrigger.API,
                created_by=request.user,
            )
        return Response(TrainingRunDetailSerializer(run).data, status=status.HTTP_201_CREATED)


@route("training/runs/<int:run_id>", name="run-detail")
class TrainingRunDetailApi(APIView):
    @extend_schema(operation_id="training_runs_retrieve", responses=TrainingRunDetailSerializer)
    def get(self, request: Request, run_id: int) -> Response:
        run = get_object_or_404(TrainingRun.objects.select_related("release"), pk=run_id)
        return Response(TrainingRunDetailSerializer(run).data)


def _transition_schema(operation_id: str, verb: str) -> Callable[[_F], _F]:
    return extend_schema(
        operation_id=operation_id,
        request=None,
        responses={
            200: TrainingRunSerializer,
            409: OpenApiResponse(FieldErrorsSerializer, description=f"Not in a state to {verb}."),
        },
    )


def _transition(run_id: int, service: Callable[..., TrainingRun]) -> Response:
    """Cancel and resume refuse the same way: 409 with the service's messages."""
    run = get_object_or_404(TrainingRun, pk=run_id)
    try:
        run = service(run=run)
    except DjangoValidationError as error:
        return Response({"detail": error.messages}, status=status.HTTP_409_CONFLICT)
    return Response(TrainingRunSerializer(run).data)


@route("training/runs/<int:run_id>/cancel", name="run-cancel")
class TrainingRunCancelApi(APIView):
    @_transition_schema("training_runs_cancel", "cancel")
    def post(self, request: Request, run_id: int) -> Response:
        return _transition(run_id, training_run_cancel)


@route("training/runs/<int:run_id>/resume", name="run-resume")
class TrainingRunResumeApi(APIView):
    @_transition_schema("training_runs_resume", "resume")
    def post(self, request: Request, run_id: int) -> Response:
        return _transition(run_id, training_run_resume)


# --- scoring ----------------------------------------------------------------------------------


@route("score", name="score")
class ScoreCreateApi(APIView):
    throttle_classes = [FailOpenScopedRateThrottle]
    throttle_scope = "score"

    @extend_schema(
        operation_id="score_create",
        request=ScoreCreateSerializer,
        responses={
            200: ScoreRequestSerializer,
            202: ScoreRequestSerializer,
            400: FieldErrorsSerializer,
        },
        description="Score (clip, references, candidate) triples with a succeeded run. The work "
        "runs on a training worker; with `wait` the answer comes back as 200 with the scores if "
        "they are ready in time, else 202 with the request to poll at /api/v1/score/{id}.",
    )
    def post(self, request: Request) -> Response:
        items = request.data.get("items") if isinstance(request.data, dict) else None
        if isinstance(items, list) and len(items) > settings.LEPUS_SCORE_MAX_ITEMS:
            raise ValidationError(
                {"items": [f"at most {settings.LEPUS_SCORE_MAX_ITEMS} items per request"]}
            )
        data = validated(ScoreCreateSerializer, request)
        run = _named_row(TrainingRun, "run", pk=data["run"])
        with _refusals_as_400():
            score_request = score_request_create(
                run=run,
                items=[dict(item) for item in data["items"]],
                created_by=request.user,
            )
        deadline = time.monotonic() + min(int(data["wait"]), settings.LEPUS_SCORE_MAX_WAIT)
        while time.monotonic() < deadline:
            score_request.refresh_from_db(fields=["status", "scores", "error", "finished_at"])
            if score_request.is_finished:
                break
            time.sleep(0.2)
        code = status.HTTP_200_OK if score_request.is_finished else status.HTTP_202_ACCEPTED
        return Response(ScoreRequestSerializer(score_request).data, status=code)


@route("score/<int:request_id>", name="score-detail")
class ScoreDetailApi(APIView):
    @extend_schema(operation_id="score_retrieve", responses=ScoreRequestSerializer)
    def get(self, request: Request, request_id: int) -> Response:
        score_request = get_object_or_404(ScoreRequest, pk=request_id)
        return Response(ScoreRequestSerializer(score_request).data)


# --- benchmark evaluation (evaluate_rigel as a job) --------------------------------------------


class FoilPairSerializer(serializers.Serializer):
    clip = serializers.CharField(max_length=200)
    caption = serializers.CharField(max_length=5000)
    foil = serializers.CharField(max_length=5000)
    references = serializers.ListField(
        child=serializers.CharField(max_length=5000), required=False, max_length=32
    )


class FoilParagraphSerializer(serializers.Serializer):
    video = serializers.CharField(max_length=200)
    benchmark = serializers.CharField(
        max_length=100,
        required=False,
        help_text='"activitynet-foil" for a paragraph of the converted official files.',
    )
    segments = serializers.ListField(child=FoilPairSerializer(), min_length=1, max_length=200)


class RigelEvaluationCreateSerializer(serializers.Serializer):
    runs = serializers.ListField(
        child=serializers.IntegerField(min_value=1), min_length=1, max_length=8
    )
    campaign = serializers.SlugField(help_text="Slug of the benchmark campaign.")
    protocols = serializers.ListField(
        child=serializers.ChoiceField(choices=list(PROTOCOL_CHOICES)),
        required=False,
        help_text="Default: the protocols of the runs' own settings (reference-free for a "
        "reference-free run, 1-ref and all-refs for a reference-based one). A protocol that no "
        "given run was trained for is refused (400).",
    )
    correlation = serializers.ChoiceField(choices=list(CORRELATIONS), default="emscore")
    metrics = serializers.ListField(
        child=serializers.ChoiceField(choices=list(METRIC_NAMES)),
        required=False,
        help_text="Metrics beside Rigel (default: the lexical ones and every learned baseline).",
    )
    foil_seed = serializers.IntegerField(default=0)
    foil_pairs = FoilPairSerializer(
        many=True,
        required=False,
        help_text="The foil protocol's pairs (the noun-swap protocol generates its own).",
    )
    foil_paragraphs = FoilParagraphSerializer(
        many=True,
        required=False,
        help_text="The foil protocol's paragraphs (ActivityNet-FOIL as convert_activitynet_foil "
        "writes them: each sentence on its segment clip); not with foil_pairs.",
    )


class RigelEvaluationSerializer(serializers.ModelSerializer):
    campaign: serializers.Field = serializers.SlugRelatedField(slug_field="slug", read_only=True)

    class Meta:
        model = RigelEvaluation
        fields = [
            "id",
            "runs",
            "campaign",
            "protocols",
            "correlation",
            "metrics",
            "foil_seed",
            "status",
            "progress",
            "progress_message",
            "result",
            "error",
            "created_at",
            "started_at",
            "finished_at",
        ]
        read_only_fields = fields


@route("training/evaluations", name="evaluation-list")
class RigelEvaluationListApi(APIView):
    @extend_schema(
        operation_id="training_evaluations_create",
        request=RigelEvaluationCreateSerializer,
        responses={201: RigelEvaluationSerializer, 400: FieldErrorsSerializer},
        description="Score finished runs on a benchmark campaign under the paper's protocols "
        "(a job on the training queue; poll /api/v1/training/evaluations/{id}).",
    )
    def post(self, request: Request) -> Response:
        import json

        from annotation.models import Campaign

        data = validated(RigelEvaluationCreateSerializer, request)
        campaign = _named_row(Campaign, "campaign", slug=data["campaign"])
        foil_file = None
        if data.get("foil_pairs") and data.get("foil_paragraphs"):
            raise ValidationError({"foil_paragraphs": ["give foil_pairs or foil_paragraphs"]})
        lines = data.get("foil_pairs") or data.get("foil_paragraphs")
        if lines:
            foil_file = "".join(json.dumps(line, sort_keys=True) + "\n" for line in lines).encode()
        with _refusals_as_400():
            evaluation = rigel_evaluation_create(
                run_ids=data["runs"],
                campaign=campaign,
                protocols=data.get("protocols"),
                correlation=data["correlation"],
                foil_seed=data["foil_seed"],
                foil_file=foil_file,
                metrics=data.get("metrics"),
                created_by=request.user,
            )
        return Response(RigelEvaluationSerializer(evaluation).data, status=status.HTTP_201_CREATED)


@route("training/evaluations/<int:evaluation_id>", name="evaluation-detail")
class RigelEvaluationDetailApi(APIView):
    @extend_schema(
        operation_id="training_evaluations_retrieve", responses=RigelEvaluationSerializer
    )
    def get(self, request: Request, evaluation_id: int) -> Response:
        evaluation = get_object_or_404(
            RigelEvaluation.objects.select_related("campaign"), pk=evaluation_id
        )
        return Response(RigelEvaluationSerializer(evaluation).data)


@route("training/metrics-leaderboard", name="metrics-leaderboard")
class MetricLeaderboardApi(APIView):
    @extend_schema(
        operation_id="training_metrics_leaderboard_retrieve",
        responses={
            200: OpenApiResponse(description="The Metrics leaderboard (see docs/metrics.md)")
        },
        description="Every caption metric against the stored human-judgment tables "
        "(`evaluate_metrics --save`), with the published figures beside; the same object as "
        "the Metrics page's ?format=json.",
    )
    def get(self, request: Request) -> Response:
        from training_bridge.services.metric_leaderboard import metric_leaderboard

        return Response(metric_leaderboard())
