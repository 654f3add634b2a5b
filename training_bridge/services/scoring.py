"""Scoring (clip, references, candidate) triples with a finished run.

Two doors: `POST /api/v1/score` records a `ScoreRequest` that a worker on the `training` queue
executes (the web process never loads torch), and `manage.py score` scores in its own process.
Both end in `score_examples`, which keeps the most recently used run's model loaded in the process.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypedDict

from django.conf import settings
from django.core.exceptions import ValidationError
from django.db import transaction

from common.jobs import job_claim, job_finish
from common.models import JobStatus
from common.tasks import enqueue, task_named
from datasets_app.models import Clip
from training_bridge.models import ScoreRequest, TrainingRun

# The task (training_bridge/tasks.py) imports this module, so it is sent by its name.
SCORE_REQUEST_TASK = "training_bridge.tasks.score_request"

logger = logging.getLogger(__name__)

MAX_REFERENCES = 32
_model_lock = threading.Lock()
_loaded: dict[str, Any] = {}  # {"run": run id, "model": TrainedRigel}


# --- validation -------------------------------------------------------------------------------


class ScoreItem(TypedDict):
    """One checked triple of a score request, as `ScoreRequest.items` stores it."""

    clip: str
    frames_key: str
    video_key: str
    duration: float | None
    references: list[str]  # empty for a reference-free run
    candidate: str


def _clean_text(value: Any, *, what: str) -> str:
    if not isinstance(value, str) or not value.strip():
        raise ValidationError(f"{what} must be a non-empty string")
    if len(value) > settings.LEPUS_MAX_CAPTION_CHARS:
        raise ValidationError(
            f"{what} is longer than {settings.LEPUS_MAX_CAPTION_CHARS} characters"
        )
    return value.strip()


def score_item_clean(
    *, item: Any, index: int, reference_free: bool, clips: dict[str, Clip]
) -> ScoreItem:
    """One triple, checked: the clip exists and has frames or a video; references are given for
    a reference-based run (and ignored by a reference-free one)."""
    where = f"item {index}"
    if not isinstance(item, dict):
        raise ValidationError(f"{where}: expected an object")
    candidate = _clean_text(item.get("candidate"), what=f"{where}: candidate")
    references_raw = item.get("references")
    references: list[str] = []
    if references_raw is not None:
        if not isinstance(references_raw, list) or len(references_raw) > MAX_REFERENCES:
            raise ValidationError(f"{where}: references must be a list of at most {MAX_REFERENCES}")
        references = [
            _clean_text(text, what=f"{where}: reference {number}")
            for number, text in enumerate(references_raw)
        ]
    if not reference_free and not references:
        raise ValidationError(f"{where}: this run is reference-based; give at least one reference")
    clip_id = item.get("clip")
    if not isinstance(clip_id, str) or clip_id not in clips:
        raise ValidationError(f"{where}: unknown clip {clip_id!r}")
    clip = clips[clip_id]
    if not (clip.frames_key or clip.video_key):
        raise ValidationError(f"{where}: clip {clip_id} has no processed video or frames yet")
    return {
        "clip": clip_id,
        "frames_key": clip.frames_key,
        "video_key": clip.video_key,
        "duration": clip.duration,
        "references": references if not reference_free else [],
        "candidate": candidate,
    }


def score_items_clean(*, items: Any, run: TrainingRun) -> list[ScoreItem]:
    if not isinstance(items, list) or not items:
        raise ValidationError("items must be a non-empty list")
    if len(items) > settings.LEPUS_SCORE_MAX_ITEMS:
        raise ValidationError(f"at most {settings.LEPUS_SCORE_MAX_ITEMS} items per request")
    wanted = {item.get("clip") for item in items if isinstance(item, dict)}
    clips = {
        clip.vatex_id: clip
        for clip in Clip.objects.filter(vatex_id__in=[w for w in wanted if isinstance(w, str)])
    }
    return [
        score_item_clean(item=item, index=index, reference_free=run.reference_free, clips=clips)
        for index, item in enumerate(items)
    ]


# --- API path: a job on the training queue ----------------------------------------------------


@transaction.atomic
def score_request_create(*, run: TrainingRun, items: Any, created_by: Any = None) -> ScoreRequest:
    if not run.can_score:
        raise ValidationError(f"run {run.pk} is {run.status}; only a succeeded run can score")
    cleaned = score_items_clean(items=items, run=run)
    request = ScoreRequest.objects.create(
        run=run,
        items=cleaned,
        created_by=created_by if getattr(created_by, "pk", None) else None,
    )
    enqueue(task_named(SCORE_REQUEST_TASK), request.pk)
    return request


def score_request_execute(*, request_id: int, task_id: str = "") -> str:
    request = job_claim(model=ScoreRequest, job_id=request_id, task_id=task_id)
    if request is None:
        return "busy"
    from training_bridge.services.reporting import heartbeat

    try:
        run = TrainingRun.objects.select_related("release").get(pk=request.run_id)
        with heartbeat(ScoreRequest, request.pk):  # loading a backbone can take a while
            scores = score_records(run=run, items=request.items)
    except Exception as error:  # the request ends failed with the reason; the worker lives on
        logger.exception("score request %s failed", request_id)
        job_finish(job=request, status=JobStatus.FAILED, error=str(error))
        return "failed"
    job_finish(job=request, status=JobStatus.SUCCEEDED, scores=scores)
    return "ok"


# --- scoring ----------------------------------------------------------------------------------


def trained_model(*, run: TrainingRun) -> Any:
    """The run's trained metric, loaded once per process (the latest run used stays loaded)."""
    from training_bridge.rigel.pipeline import load_run_model
    from training_bridge.services.runs import training_run_spec
    from training_bridge.store import DjangoStore

    with _model_lock:
        if _loaded.get("run") != run.pk:
            _loaded.clear()
            _loaded["model"] = load_run_model(
                spec=training_run_spec(run=run), store=DjangoStore(), results=run.step_results
            )
            _loaded["run"] = run.pk
        return _loaded["model"]


def score_records(*, run: TrainingRun, items: Sequence[ScoreItem]) -> list[float]:
    """Scores in [0, 1] for cleaned items (clips in storage)."""
    return score_examples(run=run, examples=_record_examples(run=run, items=items))


def rating_distributions(*, run: TrainingRun, items: Sequence[ScoreItem]) -> Any:
    """The run's K-way rating distribution [N, K] for cleaned items (the metric in the loop takes
    its score and uncertainty from it: `training_bridge.rigel.scoring.rating_moments`)."""
    examples = _record_examples(run=run, items=items)
    batch_size = int((run.hyperparameters or {}).get("eval_batch_size", 16))
    return trained_model(run=run).rating_distribution(examples, batch_size=batch_size)


def _record_examples(*, run: TrainingRun, items: Sequence[ScoreItem]) -> list[Any]:
    from training_bridge.rigel.benchmark import BenchmarkClip, benchmark_record
    from training_bridge.rigel.data import ExampleLoader
    from training_bridge.store import DjangoStore

    config_frames = int((run.hyperparameters or {}).get("frames", 8))
    lazy = trained_model(run=run).engine is not None
    loader = ExampleLoader(DjangoStore(), frames=config_frames, lazy=lazy)
    records = [
        benchmark_record(
            BenchmarkClip(
                clip_id=item["clip"],
                frames_key=item.get("frames_key", ""),
                video_key=item.get("video_key", ""),
                duration=item.get("duration"),
            ),
            item["candidate"],
            item.get("references") or (),
            str(index),
        )
        for index, item in enumerate(items)
    ]
    return list(loader.examples(records))


def score_examples(*, run: TrainingRun, examples: list[Any]) -> list[float]:
    model = trained_model(run=run)
    batch_size = int((run.hyperparameters or {}).get("eval_batch_size", 16))
    scores = model.score(examples, batch_size=batch_size)
    return [round(float(min(1.0, max(0.0, value))), 6) for value in scores]


IMAGE_SUFFIXES = (".jpg", ".jpeg", ".png", ".webp")


@dataclass(frozen=True)
class CheckedInput:
    """One checked input line of `manage.py score`: where its media is, and what to score."""

    kind: str  # "image", "file" (a video file), "folder" (of frames) or "clip" (a clip row)
    source: Any  # a Path, or the Clip
    references: list[str]
    candidate: str


def score_input_examples(*, run: TrainingRun, lines: Sequence[Mapping[str, object]]) -> list[Any]:
    """Examples for `manage.py score` input lines: {"video": <local file or frames folder, or a
    clip id>, "references": [...] (absent for reference-free), "candidate": "..."}, or
    {"image": <local JPEG/PNG/WebP file>, ...} for a still image (one frame, T = 1, the image
    path). Every line is checked before the model is loaded."""
    from training_bridge.rigel.data import ExampleLoader
    from training_bridge.store import DjangoStore

    checked = [
        _checked_input(run, line, where=f"line {number}")
        for number, line in enumerate(lines, start=1)
    ]
    frames = int((run.hyperparameters or {}).get("frames", 8))
    lazy = trained_model(run=run).engine is not None
    loader = ExampleLoader(DjangoStore(), frames=frames, lazy=lazy)
    examples: list[Any] = []
    for number, line in enumerate(checked, start=1):
        examples.extend(_input_examples(line, number, loader))
    return examples


def _checked_input(run: TrainingRun, line: Mapping[str, object], *, where: str) -> CheckedInput:
    video = line.get("video")
    candidate = _clean_text(line.get("candidate"), what=f"{where}: candidate")
    references = line.get("references") or []
    if not isinstance(references, list) or not all(isinstance(r, str) for r in references):
        raise ValidationError(f"{where}: references must be a list of strings")
    if not run.reference_free and not references:
        raise ValidationError(f"{where}: this run is reference-based; give references")
    image = line.get("image")
    if image is not None:
        if video is not None:
            raise ValidationError(f"{where}: give a video or an image, not both")
        if (
            not isinstance(image, str)
            or not Path(image).is_file()
            or Path(image).suffix.lower() not in IMAGE_SUFFIXES
        ):
            raise ValidationError(f"{where}: image must be a local {'/'.join(IMAGE_SUFFIXES)} file")
        return CheckedInput("image", Path(image), references, candidate)
    if not isinstance(video, str) or not video:
        raise ValidationError(f"{where}: video must be a file path or a clip id")
    path = Path(video)
    if path.is_file():
        return CheckedInput("file", path, references, candidate)
    if path.is_dir():
        return CheckedInput("folder", path, references, candidate)
    clip = Clip.objects.filter(vatex_id=video).first()
    if clip is None or not (clip.frames_key or clip.video_key):
        raise ValidationError(f"{where}: {video!r} is neither a file nor a ready clip")
    return CheckedInput("clip", clip, references, candidate)


def _input_examples(line: CheckedInput, number: int, loader: Any) -> list[Any]:
    from training_bridge.rigel.benchmark import BenchmarkClip, benchmark_record
    from training_bridge.rigel.inputs import RigelExample

    references, candidate, source = line.references, line.candidate, line.source
    if line.kind == "image":
        return [
            RigelExample(
                references=references,
                candidate=candidate,
                frame_paths=[source],
                frame_indices=[0],
                modality="image",
            )
        ]
    if line.kind == "file":
        return [RigelExample(references=references, candidate=candidate, video_path=source)]
    if line.kind == "folder":
        return [RigelExample(references=references, candidate=candidate, frame_paths=source)]
    clip = BenchmarkClip(
        clip_id=source.vatex_id,
        frames_key=source.frames_key,
        video_key=source.video_key,
        duration=source.duration,
    )
    return list(loader.examples([benchmark_record(clip, candidate, references, str(number))]))
