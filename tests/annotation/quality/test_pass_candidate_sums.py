"""The after-submission pass reads the workers' own judgments and, for the leave-one-out
agreement, per-candidate sums of every kept judgment that the database computes
(annotation/quality/incremental.py, `candidate_sums_load`). It computes exactly what a read of
every judgment on those candidates computes, and a sequence of passes, with exclusions, a late
submission and a curator's re-inclusion in between, ends where a full QC run does.

Since migration 0018 the pass sums only the candidates on which its workers have judgments their
last pass did not see; the others' sums are those aggregation stored on them
(`CampaignCandidate.kept_sums` / `kept_counts`). Each pass's read is checked against a sum of
every judgment, and its summing read against the candidates of the new judgments."""

from __future__ import annotations

import random
from typing import Any

import numpy as np
import pytest
from django.db import transaction
from django.db.models import F
from django.utils import timezone

from annotation.models import (
    CampaignCandidate,
    Judgment,
    Participation,
    ParticipationStatus,
    ReviewItem,
    WorkerQCStats,
)
from annotation.quality import incremental
from annotation.quality.aggregation import AGGREGATE_FIELDS
from annotation.quality.candidate_sums import CandidateSums, candidate_sums_load
from annotation.quality.evaluation import STAT_FIELDS, workers_evaluate
from annotation.quality.exclusions import worker_include
from annotation.quality.incremental import quality_catch_up
from annotation.quality.loading import campaign_slice_load
from annotation.quality.rules import qc_rules_merge
from annotation.quality.run import qc_campaign_full
from annotation.quality.running import COUNTS
from annotation.quality.running_store import running_states_load, slice_state, stored_sums_read
from tests.annotation.quality.factories import quality_crowd_campaign, quality_judge, quality_worker

pytestmark = pytest.mark.django_db

KEYS = ("descriptiveness", "relevance", "fluency")
# Compared with a full run: every statistic but the speed against the campaign's median, which
# the pass takes over the other workers' judgments (and caches), the full run over everyone's.
COMPARED = tuple(name for name in STAT_FIELDS if name != "speed_vs_campaign")


def _clips(campaign) -> list[list[CampaignCandidate]]:  # type: ignore[no-untyped-def]
    groups: dict[int, list[CampaignCandidate]] = {}
    for item in campaign.items.order_by("id"):
        groups.setdefault(item.clip_id, []).append(item)
    return list(groups.values())


def _rating(kind: str, item: CampaignCandidate, rng: random.Random) -> int:
    if kind == "random":
        return rng.randint(1, 5)
    if kind == "uniform":
        return 3
    return min(5, max(1, 1 + item.pk % 5 + rng.choice((-1, 0, 1))))


def _submit(participation: Participation, kind: str, items, rng: random.Random) -> None:  # type: ignore[no-untyped-def]
    for item in items:
        values = {key: _rating(kind, item, rng) for key in KEYS}
        if kind == "partial":  # leaves a question out now and then
            values.pop(rng.choice((*KEYS, "none")), None)
        quality_judge(
            participation,
            item,
            values,
            server_ms=rng.randint(2_000, 4_000) if kind == "fast" else rng.randint(15_000, 30_000),
        )
    Participation.objects.filter(pk=participation.pk).update(
        assignments_submitted=F("assignments_submitted") + 1, last_seen_at=timezone.now()
    )


def _stale(campaign) -> list[int]:  # type: ignore[no-untyped-def]
    return sorted(
        Participation.objects.filter(
            campaign=campaign, status=ParticipationStatus.ACTIVE, assignments_submitted__gt=0
        )
        .filter(last_seen_at__gt=F("qc_stats__computed_at"))
        .values_list("id", flat=True)
    ) or sorted(
        Participation.objects.filter(
            campaign=campaign, status=ParticipationStatus.ACTIVE, qc_stats__isnull=True
        )
        .exclude(assignments_submitted=0)
        .values_list("id", flat=True)
    )


def _evaluations_agree(campaign, targets: list[int]) -> list[dict[str, Any]]:  # type: ignore[no-untyped-def]
    """The statistics, flags and exclusions of `targets` from their own judgments plus the
    candidate sums equal those from every judgment on their candidates; returns the rows."""
    candidate_ids = set(
        Judgment.objects.filter(participation_id__in=targets).values_list(
            "campaign_candidate_id", flat=True
        )
    )
    rules = qc_rules_merge(campaign.qc_rules)
    results: list[dict[str, Any]] = []
    for own_only in (False, True):
        data = campaign_slice_load(
            campaign=campaign,
            candidate_ids=candidate_ids,
            extra_participation_ids=targets,
            for_aggregation=False,
            judges=targets if own_only else None,
        )
        sums = candidate_sums_load(
            campaign=campaign, candidate_ids=data.candidates.ids, question_keys=data.question_keys
        )
        if not own_only:
            items = len(data.candidates)
            assert sums.total.tolist() == np.bincount(data.judgments.item, minlength=items).tolist()
        positions = np.searchsorted(data.workers.ids, np.asarray(targets))
        statistics, flags, decisions = workers_evaluate(
            data,
            rules=rules,
            campaign_median=22.0,
            targets=positions,
            agreement_sums=sums.sums if own_only else None,
        )
        results.append(
            {
                "rows": [statistics.row(index) for index in positions.tolist()],
                "agreement": statistics.agreement[positions],
                "flags": [
                    [flag.as_json() for flag in flags.get(index, [])]
                    for index in positions.tolist()
                ],
                "decisions": [(d.participation_id, d.rules) for d in decisions],
            }
        )
    full, own = results
    assert own["rows"] == full["rows"]
    assert own["flags"] == full["flags"]
    assert own["decisions"] == full["decisions"]
    np.testing.assert_allclose(own["agreement"], full["agreement"], rtol=1e-12, atol=1e-12)
    return full["rows"]


def _state(campaign) -> dict[str, Any]:  # type: ignore[no-untyped-def]
    active = list(
        Participation.objects.filter(
            campaign=campaign, status=ParticipationStatus.ACTIVE
        ).values_list("id", flat=True)
    )
    return {
        "candidates": {
            row["id"]: row
            for row in CampaignCandidate.objects.filter(campaign=campaign).values(
                "id", *AGGREGATE_FIELDS, "kept_sums", "kept_counts"
            )
        },
        "review": sorted(
            ReviewItem.objects.filter(campaign=campaign).values_list(
                "campaign_candidate_id", "status", "rating_range", "priority"
            )
        ),
        "workers": sorted(
            Participation.objects.filter(campaign=campaign).values_list("id", "status")
        ),
        "kept": sorted(Judgment.objects.filter(campaign=campaign).values_list("id", "is_excluded")),
        "statistics": sorted(
            WorkerQCStats.objects.filter(participation_id__in=active).values_list(
                "participation_id", *COMPARED
            )
        ),
        "flagged": sorted(
            (row.participation_id, sorted(flag["rule"] for flag in row.flags))
            for row in WorkerQCStats.objects.filter(participation_id__in=active)
        ),
    }


def _full_run_state(campaign) -> dict[str, Any]:  # type: ignore[no-untyped-def]
    with transaction.atomic():
        qc_campaign_full(campaign=campaign)
        state = _state(campaign)
        # a full run clears every running state: each worker's next pass reads all their
        # judgments (the stored statistics above are the full run's)
        assert not WorkerQCStats.objects.filter(
            participation__campaign=campaign, running_counts__isnull=False
        ).exists()
        transaction.set_rollback(True)
    return state


def _states_hold(campaign) -> int:  # type: ignore[no-untyped-def]
    """Every stored running state equals the state of the worker's judgments up to their
    watermark against the candidates' stored sums, computed from scratch: the same integers,
    the same sorted values. Returns how many states were checked."""
    active = sorted(
        Participation.objects.filter(
            campaign=campaign, status=ParticipationStatus.ACTIVE
        ).values_list("id", flat=True)
    )
    stored, present, marks = running_states_load(active)
    if not present.any():
        return 0
    data = campaign_slice_load(campaign=campaign, judges=active)
    sums = stored_sums_read(
        campaign=campaign, candidate_ids=data.candidates.ids, questions=len(data.question_keys)
    )
    through = np.full(len(data.workers), -1)
    positions = np.searchsorted(data.workers.ids, active)
    through[positions] = marks[:, 0]
    judgments = data.judgments
    fresh = slice_state(
        data, judgments.ids <= through[judgments.worker], sums, ~judgments.excluded
    ).take(positions)
    for row in np.flatnonzero(present).tolist():
        assert dict(zip(COUNTS, stored.counts[row].tolist(), strict=True)) == dict(
            zip(COUNTS, fresh.counts[row].tolist(), strict=True)
        ), active[row]
        width = max(stored.agreement.shape[1], fresh.agreement.shape[1])
        for state in (stored, fresh):
            state.agreement = np.pad(
                state.agreement, ((0, 0), (0, width - state.agreement.shape[1]), (0, 0))
            )
        assert stored.agreement[row].tolist() == fresh.agreement[row].tolist(), active[row]
        assert stored.timing_ms[row].tolist() == fresh.timing_ms[row].tolist()
        assert stored.clip_ratios[row].tolist() == fresh.clip_ratios[row].tolist()
    return int(present.sum())


def _clip_candidates(campaign, candidate_ids: set[int]) -> set[int]:  # type: ignore[no-untyped-def]
    """Every candidate of the clips of `candidate_ids`."""
    return set(
        CampaignCandidate.objects.filter(
            campaign=campaign,
            clip_id__in=CampaignCandidate.objects.filter(id__in=candidate_ids).values("clip_id"),
        ).values_list("id", flat=True)
    )


def _stored_rows_match(targets: list[int], expected: list[dict[str, Any]]) -> int:
    """What the pass stored (from running statistics) is what every judgment gives."""
    stored_rows = {
        row["participation_id"]: {name: row[name] for name in COMPARED}
        for row in WorkerQCStats.objects.filter(participation_id__in=targets).values(
            "participation_id", *COMPARED
        )
    }
    for participation_id, row in zip(targets, expected, strict=True):
        assert stored_rows[participation_id] == {name: row[name] for name in COMPARED}
    return len(targets)


class SumsSpy:
    """Wraps the pass's `candidate_sums_load`: checks what it returns (stored sums for most
    candidates) against a sum of every judgment on the same candidates, and records which
    candidates it summed from the judgments."""

    def __init__(self) -> None:
        self.summed: set[int] = set()
        self.read: set[int] = set()

    def __call__(self, **arguments: Any) -> CandidateSums:
        result = candidate_sums_load(**arguments)
        every = candidate_sums_load(**{**arguments, "live": None})
        assert result.sums.total.tolist() == every.sums.total.tolist()
        assert result.sums.count.tolist() == every.sums.count.tolist()
        ids = arguments["candidate_ids"]
        if arguments.get("live") is not None:
            unchanged = ~result.live
            # A stored row is one whose judgments did not change since it was aggregated.
            assert result.total[unchanged].tolist() == every.total[unchanged].tolist()
            assert result.kept[unchanged].tolist() == every.kept[unchanged].tolist()
        self.summed |= set(ids[result.live].tolist())
        self.read |= set(ids.tolist())
        return result


def _latest_judgment_id() -> int:
    return Judgment.objects.order_by("-id").values_list("id", flat=True).first() or 0


def test_passes_from_candidate_sums_end_where_a_full_run_does(monkeypatch):
    campaign = quality_crowd_campaign(clips=16, candidates_per_clip=3, quota=10)
    clips = _clips(campaign)
    rng = random.Random(29)
    kinds = ["person"] * 4 + ["partial", "random", "uniform", "fast"]
    workers = [quality_worker(campaign, f"{kind}-{index}") for index, kind in enumerate(kinds)]
    rated: dict[int, int] = {worker.pk: 0 for worker in workers}
    late_submitted = reincluded = False
    # Re-included since their last pass: their state was dropped when they were excluded.
    reincluded_since: set[int] = set()
    bounded_passes = checked = compared = 0
    for round_number in range(14):
        last = round_number == 13
        before = _latest_judgment_id()
        late_now = False
        for worker, kind in zip(workers, kinds, strict=True):
            worker.refresh_from_db()
            if not last and rng.random() < 0.2:
                continue  # not everybody submits before every pass
            if worker.status == ParticipationStatus.EXCLUDED:
                if late_submitted:
                    continue
                late_submitted = late_now = True  # a live lease: stored after the exclusion
            _submit(worker, kind, clips[rated[worker.pk]], rng)
            rated[worker.pk] += 1
        uniform = workers[kinds.index("uniform")]
        uniform.refresh_from_db()
        if not reincluded and uniform.status == ParticipationStatus.EXCLUDED:
            worker_include(participation=uniform, actor=None, note="asked them")
            reincluded = True
            reincluded_since.add(uniform.pk)
        targets = _stale(campaign)
        expected = _evaluations_agree(campaign, targets) if targets else []
        spy = SumsSpy()
        monkeypatch.setattr(incremental, "candidate_sums_load", spy)
        quality_catch_up(campaign_id=campaign.pk)
        monkeypatch.undo()
        # The summing read covers the candidates of the new judgments of the pass's workers
        # (and every candidate of a worker re-included since their last pass), no more.
        new = set(
            Judgment.objects.filter(id__gt=before, participation_id__in=targets).values_list(
                "campaign_candidate_id", flat=True
            )
        )
        new |= set(
            Judgment.objects.filter(
                participation_id__in=reincluded_since & set(targets)
            ).values_list("campaign_candidate_id", flat=True)
        )
        # The pass read the judgments of the clips of those new judgments, not the workers'
        # histories (unless someone was excluded: then it reads everything of its workers).
        if not Participation.objects.filter(
            id__in=targets, status=ParticipationStatus.EXCLUDED
        ).exists():
            assert spy.read == _clip_candidates(campaign, new), round_number
            bounded_passes += 1
        reincluded_since -= set(targets)
        assert spy.summed == new, round_number
        # (Not in the round of the late submission: the pass excludes it first, `expected`
        # counted it.)
        compared += _stored_rows_match(targets, expected) if not late_now else 0
        # The running states of every active worker (the pass's, and the others' moved by
        # aggregation) are what their judgments give now.
        checked += _states_hold(campaign)
    assert bounded_passes >= 10 and checked >= 50 and compared >= 50
    final = _state(campaign)
    assert final == _full_run_state(campaign)
    _states_hold(campaign)
    statuses = dict(final["workers"])

    assert statuses[workers[kinds.index("random")].pk] == ParticipationStatus.EXCLUDED
    assert statuses[uniform.pk] == ParticipationStatus.ACTIVE
    assert reincluded and late_submitted
    assert dict(final["flagged"])[uniform.pk] == ["uniform"]  # flagged, no longer excluded
    stored = CampaignCandidate.objects.filter(campaign=campaign, kept_judgments__gt=0)
    assert all(len(row.kept_sums or ()) == len(KEYS) for row in stored)


def test_a_late_or_changed_judgment_makes_the_worker_summed_in_full():
    """Counts up to the stored watermark that no longer match (a judgment committed after the
    read with a smaller id, one excluded or re-included): every candidate of the worker is
    summed from the judgments; candidates never aggregated since migration 0018 are too."""
    campaign = quality_crowd_campaign(clips=4, candidates_per_clip=3, quota=10)
    clips = _clips(campaign)
    rng = random.Random(7)
    worker = quality_worker(campaign, "person-0")
    other = quality_worker(campaign, "person-1")
    for index in range(3):
        _submit(worker, "person", clips[index], rng)
        _submit(other, "person", clips[index], rng)
    quality_catch_up(campaign_id=campaign.pk)

    def summed() -> set[int]:
        """The candidates the pass would sum: those of the judgments above a watermark that
        holds (with a stored state), else all, plus those without usable stored sums."""
        _, present, marks = running_states_load([worker.pk])
        holds = present & incremental.watermarks_hold(campaign, [worker.pk], marks)
        through = int(marks[0, 0]) if holds[0] else -1
        data = campaign_slice_load(campaign=campaign, judges=[worker.pk], candidate_ids=mine())
        live = np.zeros(len(data.candidates), dtype=bool)
        live[data.judgments.item[data.judgments.ids > through]] = True
        sums = candidate_sums_load(
            campaign=campaign,
            candidate_ids=data.candidates.ids,
            question_keys=data.question_keys,
            live=live,
        )
        return set(data.candidates.ids[sums.live].tolist())

    def mine() -> set[int]:
        return set(
            Judgment.objects.filter(participation=worker).values_list(
                "campaign_candidate_id", flat=True
            )
        )

    assert summed() == set()
    _submit(worker, "person", clips[3], rng)
    assert summed() == {item.pk for item in clips[3]}
    quality_catch_up(campaign_id=campaign.pk)
    assert summed() == set()
    stats = WorkerQCStats.objects.get(participation=worker)
    assert stats.judgments_through is not None and stats.kept_through is not None
    WorkerQCStats.objects.filter(pk=stats.pk).update(judgments_through=stats.judgments_through - 1)
    assert summed() == mine()
    WorkerQCStats.objects.filter(pk=stats.pk).update(
        judgments_through=stats.judgments_through, kept_through=stats.kept_through - 1
    )
    assert summed() == mine()
    WorkerQCStats.objects.filter(pk=stats.pk).update(kept_through=stats.kept_through)
    assert summed() == set()
    CampaignCandidate.objects.filter(pk=clips[0][0].pk).update(kept_sums=None)
    CampaignCandidate.objects.filter(pk=clips[1][0].pk).update(kept_counts=[1])
    assert summed() == {clips[0][0].pk, clips[1][0].pk}
