"""Fixtures of the `evaluate_rigel` tests: a small VATEX-EVAL campaign whose clips have frames in
storage, finished runs without training (for a stand-in scorer), and that stand-in."""

from __future__ import annotations

import numpy as np

from annotation.models import Campaign, CampaignCandidate
from common.models import JobStatus
from datasets_app.models import Clip
from tests.metrics.vatex_eval_data import vatex_eval_subset
from tests.rigel.release_support import jpeg
from tests.training_bridge.metric_benchmark_data import build_vatex_eval_campaign
from training_bridge.models import TrainingRun
from training_bridge.services import training_run_create
from training_bridge.store import DjangoStore


def benchmark_campaign(candidates: int = 24, *, frames: bool = True) -> Campaign:
    """The first `candidates` of VATEX-EVAL (6 per clip, 9 references, 3 rater slots) as an
    imported campaign; each clip gets 4 JPEG frames in storage."""
    campaign = build_vatex_eval_campaign(vatex_eval_subset(candidates))
    if frames:
        add_frames(campaign_clips(campaign))
    return campaign


def campaign_clips(campaign: Campaign):  # type: ignore[no-untyped-def]
    return Clip.objects.filter(
        pk__in=CampaignCandidate.objects.filter(campaign=campaign).values("clip_id")
    )


def add_frames(clips) -> None:  # type: ignore[no-untyped-def]
    store = DjangoStore()
    rng = np.random.default_rng(0)
    for clip in clips:
        clip.frames_key = f"clips/{clip.vatex_id}/frames"
        for index in range(4):
            store.put_bytes(f"{clip.frames_key}/{index:03d}.jpg", jpeg(rng))
        clip.frame_count, clip.duration = 4, 10.0
        clip.save(update_fields=["frames_key", "frame_count", "duration"])


def finished_run(release, **fields) -> TrainingRun:  # type: ignore[no-untyped-def]
    """A run row marked succeeded (nothing trained: for the stand-in scorer)."""
    run = training_run_create(release=release, backbone="tiny", start=False, **fields)
    TrainingRun.objects.filter(pk=run.pk).update(status=JobStatus.SUCCEEDED)
    run.refresh_from_db()
    return run


class StandInScorer:
    """Scores from the text alone (no model): a deterministic function of the candidate, its
    references and the prompt setting, so that a test can compute the expected correlations."""

    def __init__(self, calls: list | None = None) -> None:  # type: ignore[type-arg]
        self.calls = calls if calls is not None else []

    @staticmethod
    def value(text: str, references: tuple[str, ...], reference_free: bool) -> float:
        words = text.lower().split()
        overlap = sum(1 for word in words if any(word in ref.lower() for ref in references))
        return round(0.01 * len(words) + 0.1 * overlap + (0.0 if reference_free else 0.003), 6)

    def score(self, records, *, reference_free, progress=None, offset=0, total=None):  # type: ignore[no-untyped-def]
        self.calls.append((len(records), reference_free))
        return np.array(
            [self.value(r.text, r.references, reference_free) for r in records], dtype=np.float64
        )

    def score_together(self, settings, *, progress=None, offset=0, total=None):  # type: ignore[no-untyped-def]
        """As `ProtocolScorer.score_together` where an engine scores: every list in one call
        (the same scores as list by list)."""
        return [self.score(records, reference_free=free) for records, free in settings]

    def close(self) -> None:
        pass
