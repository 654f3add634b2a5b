"""Dashboard pages of training_bridge (curators only): runs, one run with its curves and
evaluation table, a comparison of runs, and the forms that start, cancel and resume runs."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from django.contrib import messages
from django.core.exceptions import ValidationError
from django.core.paginator import Paginator
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.shortcuts import get_object_or_404, redirect, render

from common import storage
from common.forms import form_created
from common.models import JobStatus
from common.routes import curator_page
from training_bridge import selectors
from training_bridge.charts import line_chart
from training_bridge.forms import TrainingRunForm
from training_bridge.metrics.benchmark import CORRELATION_KEYS
from training_bridge.models import RigelEvaluation, TrainingRun, TrainingTrigger
from training_bridge.services import (
    training_release_video_coverage,
    training_run_cancel,
    training_run_create,
    training_run_resume,
)
from training_bridge.services.metric_leaderboard import metric_leaderboard, metric_leaderboard_csv
from training_bridge.services.rigel_benchmark import (
    FOIL_SETTINGS,
    PROTOCOL_CHOICES,
    foil_rows,
    result_tables,
    rigel_evaluation_create,
)

MAX_COMPARED = 6


def _run_list_page(
    request: HttpRequest, form: TrainingRunForm, *, status: int = 200
) -> HttpResponse:
    runs = selectors.training_run_list(status=request.GET.get("status") or None)
    page = Paginator(runs, 25).get_page(request.GET.get("page"))
    return render(
        request,
        "training_bridge/run_list.html",
        {
            "page": page,
            "form": form,
            "releases": form.releases,
            "statuses": JobStatus.choices,
            "status_filter": request.GET.get("status", ""),
        },
        status=status,
    )


@curator_page("", name="run-list")
def run_list(request: HttpRequest) -> HttpResponse:
    return _run_list_page(request, TrainingRunForm())


@curator_page("start/", name="run-start", methods=("POST",))
def run_start(request: HttpRequest) -> HttpResponse:
    form = TrainingRunForm(request.POST)
    run = form_created(
        form,
        lambda: training_run_create(
            **form.service_arguments(),
            trigger=TrainingTrigger.DASHBOARD,
            created_by=request.user,
        ),
        joined=True,
    )
    if run is None:
        # Invalid, or a large backbone not yet confirmed: the form again, saying what it needs.
        return _run_list_page(request, form, status=400)
    coverage = training_release_video_coverage(release=run.release)
    messages.success(request, f"Training run {run.pk} queued. {coverage.summary()}".strip())
    return redirect("training_bridge:run-detail", run_id=run.pk)


def _artifact_links(run: TrainingRun) -> list[dict[str, str]]:
    links = []
    for name, key in sorted((run.artifacts or {}).items()):
        try:
            url = storage.media_url(key, download_name=key.rsplit("/", 1)[-1])
        except storage.StorageUnavailable:
            url = ""
        links.append({"name": name, "key": key, "url": url})
    return links


@curator_page("<int:run_id>/", name="run-detail")
def run_detail(request: HttpRequest, run_id: int) -> HttpResponse:
    run = get_object_or_404(TrainingRun.objects.select_related("release", "created_by"), pk=run_id)
    history = run.history or []
    phase1_loss = selectors.curve(history, phase="phase1", x="epoch", y="loss")
    phase1_tau = selectors.curve(history, phase="phase1", x="epoch", y="validation_tau")
    phase2_loss = selectors.curve(history, phase="phase2", x="step", y="loss")
    return render(
        request,
        "training_bridge/run_detail.html",
        {
            "run": run,
            "loss_chart": line_chart(
                [("EMD x T² (train)", phase1_loss)],
                title="Phase 1: distillation loss",
                x_label="epoch",
                y_label="loss",
            ),
            "tau_chart": line_chart(
                [("Kendall tau_b (validation)", phase1_tau)],
                title="Phase 1: validation Kendall tau",
                x_label="epoch",
                y_label="tau",
            ),
            "phase2_chart": line_chart(
                [("cross-entropy", phase2_loss)],
                title="Phase 2: loss per step",
                x_label="step",
                y_label="loss",
            ),
            "tables": selectors.evaluation_tables(run),
            "evaluation_notes": (run.evaluation or {}).get("notes", []),
            "artifacts": _artifact_links(run),
            "benchmark_campaigns": _benchmark_campaigns() if run.can_score else [],
            "protocol_choices": PROTOCOL_CHOICES,
            "evaluations": RigelEvaluation.objects.filter(runs__contains=[run.pk])[:10],
            "results": run.step_results or {},
            "is_active": run.status in (JobStatus.QUEUED, JobStatus.RUNNING),
        },
    )


@curator_page("<int:run_id>/cancel/", name="run-cancel", methods=("POST",))
def run_cancel(request: HttpRequest, run_id: int) -> HttpResponse:
    return _run_action(request, run_id, training_run_cancel, "Cancellation of run {} requested.")


@curator_page("<int:run_id>/resume/", name="run-resume", methods=("POST",))
def run_resume(request: HttpRequest, run_id: int) -> HttpResponse:
    return _run_action(
        request, run_id, training_run_resume, "Run {} re-queued from its last checkpoint."
    )


def _run_action(
    request: HttpRequest, run_id: int, action: Callable[..., object], success: str
) -> HttpResponse:
    """Cancel and resume differ only in the service they call and what they say on success."""
    run = get_object_or_404(TrainingRun, pk=run_id)
    try:
        action(run=run)
        messages.success(request, success.format(run.pk))
    except ValidationError as error:
        messages.error(request, "; ".join(error.messages))
    return redirect("training_bridge:run-detail", run_id=run.pk)


@curator_page("compare/", name="run-compare")
def run_compare(request: HttpRequest) -> HttpResponse:
    ids: list[int] = []
    for value in request.GET.getlist("run"):
        for part in value.split(","):
            if part.strip().isdigit() and int(part) not in ids:
                ids.append(int(part))
    ids = ids[:MAX_COMPARED]
    by_id = {
        run.pk: run for run in TrainingRun.objects.select_related("release").filter(pk__in=ids)
    }
    runs = [by_id[i] for i in ids if i in by_id]
    comparison = selectors.training_runs_compare(runs=runs) if runs else None
    tau_series = [
        (
            f"run {run.pk}",
            selectors.curve(run.history or [], phase="phase1", x="epoch", y="validation_tau"),
        )
        for run in runs
    ]
    return render(
        request,
        "training_bridge/run_compare.html",
        {
            "runs": runs,
            "comparison": comparison,
            "tau_chart": line_chart(
                tau_series, title="Phase 1: validation Kendall tau", x_label="epoch", y_label="tau"
            )
            if runs
            else None,
            "recent": selectors.training_run_list()[:20],
            "selected": ids,
            "benchmark_campaigns": _benchmark_campaigns() if runs else [],
            "protocol_choices": PROTOCOL_CHOICES,
        },
    )


# --- benchmark evaluation -----------------------------------------------------------------------


def _benchmark_campaigns() -> Any:
    from annotation.models import Campaign

    return Campaign.objects.order_by("-is_imported", "slug")[:200]


def _uploaded_foil_file(request: HttpRequest) -> bytes | None:
    """The form's FOIL file, if one was chosen (refused above the service's size limit)."""
    from training_bridge.services.rigel_benchmark import FOIL_MAX_BYTES

    upload = request.FILES.get("foil_file")
    if upload is None:
        return None
    if upload.size is not None and upload.size > FOIL_MAX_BYTES:
        raise ValidationError(f"the FOIL file is larger than {FOIL_MAX_BYTES} bytes")
    return upload.read(FOIL_MAX_BYTES + 1)


@curator_page("evaluations/start/", name="evaluation-start", methods=("POST",))
def evaluation_start(request: HttpRequest) -> HttpResponse:
    """Start `evaluate_rigel` as a job for the runs of the form (one run's page, or the
    comparison page's selection)."""
    from annotation.models import Campaign

    ids = [int(v) for v in request.POST.getlist("run") if v.isdigit()]
    back = (
        redirect("training_bridge:run-detail", run_id=ids[0])
        if len(ids) == 1
        else redirect("training_bridge:run-compare")
    )
    campaign = Campaign.objects.filter(slug=request.POST.get("campaign", "")).first()
    if campaign is None:
        messages.error(request, "Choose a benchmark campaign.")
        return back
    try:
        evaluation = rigel_evaluation_create(
            run_ids=ids,
            campaign=campaign,
            protocols=request.POST.getlist("protocol") or None,
            correlation=request.POST.get("correlation", "emscore"),
            foil_seed=int(request.POST.get("foil_seed") or 0),
            foil_file=_uploaded_foil_file(request),
            created_by=request.user,
        )
    except (ValidationError, ValueError) as error:
        messages.error(
            request,
            "; ".join(error.messages) if isinstance(error, ValidationError) else str(error),
        )
        return back
    messages.success(request, f"Evaluation {evaluation.pk} queued.")
    return redirect("training_bridge:evaluation-detail", evaluation_id=evaluation.pk)


@curator_page("evaluations/<int:evaluation_id>/", name="evaluation-detail")
def evaluation_detail(request: HttpRequest, evaluation_id: int) -> HttpResponse:
    """One benchmark evaluation: progress while it runs, then the runs and the standard metrics in
    one table per protocol (the ablation comparison when several runs), and FOIL accuracy."""
    evaluation = get_object_or_404(
        RigelEvaluation.objects.select_related("campaign"), pk=evaluation_id
    )
    result = evaluation.result or {}
    runs = {run.pk: run for run in TrainingRun.objects.filter(pk__in=evaluation.runs)}
    return render(
        request,
        "training_bridge/evaluation_detail.html",
        {
            "evaluation": evaluation,
            "runs": [runs[pk] for pk in evaluation.runs if pk in runs],
            "tables": result_tables(result),
            "foil": result.get("foil"),
            "foil_rows": foil_rows(result),
            "foil_settings": FOIL_SETTINGS,
            "result": result,
            "is_active": evaluation.status in (JobStatus.QUEUED, JobStatus.RUNNING),
        },
    )


# --- the Metrics leaderboard --------------------------------------------------------------------


@curator_page("metrics/", name="metrics-leaderboard")
def metrics_leaderboard(request: HttpRequest) -> HttpResponse:
    """Every caption metric against the stored human-judgment tables (`evaluate_metrics --save`),
    the published figures beside; ``?format=csv`` or ``?format=json`` downloads the same."""
    board = metric_leaderboard()
    kind = request.GET.get("format", "")
    if kind == "json":
        return JsonResponse(board)
    if kind == "csv":
        response = HttpResponse(
            metric_leaderboard_csv(board), content_type="text/csv; charset=utf-8"
        )
        response["Content-Disposition"] = 'attachment; filename="lepus-metrics-leaderboard.csv"'
        return response
    return render(
        request,
        "training_bridge/metrics_leaderboard.html",
        {"board": board, "keys": CORRELATION_KEYS},
    )
