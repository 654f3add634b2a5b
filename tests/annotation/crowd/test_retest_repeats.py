"""Test-retest repeats through the real worker API (join → next → submit) on PostgreSQL.

Two campaigns over the same clips and the same simulated crowd, one with repeats and one without:
every figure that quotas, payments, aggregates, agreement and releases show must be the same, and
the repeats must only show up in the consistency figures. Consistent workers give the same ratings
again when a candidate comes back (kappa 1); inconsistent ones answer at random the second time.
Each worker rates every clip (quota = crowd size), so who rated what does not depend on the order
in which they work.
"""

from __future__ import annotations

import json
import random
from datetime import timedelta
from decimal import Decimal
from io import StringIO
from typing import Any

import numpy as np
import pytest
from django.core.management import call_command
from django.utils import timezone
from rest_framework.test import APIClient

from annotation.crowd.services.assignment import (
    assignment_claim_next,
)
from annotation.crowd.services.campaigns import campaign_create, campaign_update
from annotation.crowd.services.offers import assignment_offer_payload
from annotation.crowd.services.payments import payments_rows
from annotation.crowd.services.progress import participation_progress
from annotation.crowd.services.repeats import repeat_clip_choose, repeats_due
from annotation.crowd.services.submission import (
    AssignmentNotFound,
    SubmissionInvalid,
    assignment_submit,
)
from annotation.models import (
    Assignment,
    Campaign,
    CampaignCandidate,
    Judgment,
    Participation,
    Repeat,
    RepeatJudgment,
    WorkerQCStats,
)
from annotation.quality.agreement import campaign_agreement
from annotation.quality.consistency import campaign_retest, worker_retest_figures
from annotation.quality.run import qc_run_inline
from tests.annotation.crowd_factories import clips_with_candidates, crowd_join
from tests.export.helpers import build, jsonl_records, manifest, read_file

pytestmark = pytest.mark.django_db


@pytest.fixture(autouse=True)
def seeded_repeats(monkeypatch: pytest.MonkeyPatch) -> None:
    """Which clip comes back is drawn with SystemRandom in production; seeded here so the random
    second ratings of the erratic workers land on the same pairs every run (no flaky kappa)."""
    monkeypatch.setattr("annotation.crowd.services.repeats._random", random.Random(16))


NEXT = "/api/v1/worker/assignments/next"
CLIPS = 16
CANDIDATES = 2
GAP = 2
SHARE = 0.25
CONSISTENT = ("steady-1", "steady-2")
INCONSISTENT = ("erratic-1", "erratic-2")


class Rater:
    """A simulated worker who remembers what they rated (as a person might not)."""

    def __init__(self, name: str, *, consistent: bool, positions: dict[int, int]) -> None:
        self.name, self.consistent, self.positions = name, consistent, positions
        self.client = APIClient()
        self.random = random.Random(f"second-{name}")
        self.first: dict[int, dict[str, int]] = {}
        self.clips: list[int] = []  # clip ids in the order they were served
        self.repeat_flags: list[bool] = []

    def join(self, slug: str) -> None:
        response = self.client.post(
            f"/api/v1/campaigns/{slug}/join",
            {"platform": "prolific", "external_id": self.name, "study_id": "s", "session_id": "x"},
            format="json",
        )
        assert response.status_code in (200, 201), response.content
        self.client.credentials(HTTP_AUTHORIZATION=f"Worker {response.json()['worker_token']}")

    def original(self, candidate_id: int, key: str) -> int:
        # The same worker rates the same candidate position alike in both campaigns.
        return random.Random(f"{self.name}-{self.positions[candidate_id]}-{key}").randint(1, 5)

    def step(self) -> dict[str, Any] | None:
        response = self.client.post(NEXT, {}, format="json")
        if response.status_code == 204:
            return None
        assert response.status_code == 200, response.content
        payload = response.json()
        keys = [question["key"] for question in payload["questions"]]
        repeat = any(candidate["id"] in self.first for candidate in payload["candidates"])
        ratings = []
        for candidate in payload["candidates"]:
            identifier = candidate["id"]
            if identifier in self.first:
                assert repeat
                values = (
                    self.first[identifier]
                    if self.consistent
                    else {key: self.random.randint(1, 5) for key in keys}
                )
            else:
                assert not repeat, "a repeat holds only candidates rated before"
                values = {key: self.original(identifier, key) for key in keys}
                self.first[identifier] = values
            ratings.append({"candidate_id": identifier, **values})
        body = {"ratings": ratings, "client_timing": {"active_ms": 5000, "video_played_ms": 1500}}
        submitted = self.client.post(
            f"/api/v1/worker/assignments/{payload['assignment_id']}/submit", body, format="json"
        )
        assert submitted.status_code == 201, submitted.content
        assert set(submitted.json()) == {"assignment_id", "status", "judgments", "submitted_at"}
        # The same submit again replays the stored answer, repeat or not.
        again = self.client.post(
            f"/api/v1/worker/assignments/{payload['assignment_id']}/submit", body, format="json"
        )
        assert again.status_code == 200 and again.json() == submitted.json()
        self.clips.append(payload["clip"]["id"])
        self.repeat_flags.append(repeat)
        return payload


def _crowd(campaign: Campaign) -> list[Rater]:
    ids = sorted(CampaignCandidate.objects.filter(campaign=campaign).values_list("id", flat=True))
    positions = {pk: index for index, pk in enumerate(ids)}
    raters = [Rater(name, consistent=True, positions=positions) for name in CONSISTENT]
    raters += [Rater(name, consistent=False, positions=positions) for name in INCONSISTENT]
    for rater in raters:
        rater.join(campaign.slug)
        while rater.step() is not None:
            pass
    return raters


def _campaign(slug: str, clips: list[Any], **options: Any) -> Campaign:
    campaign = campaign_create(
        slug=slug,
        name=slug,
        judgments_per_candidate=len(CONSISTENT) + len(INCONSISTENT),
        clip_vatex_ids=[clip.vatex_id for clip in clips],
        pay_per_assignment=Decimal("0.50"),
        review_range_threshold=5,  # nothing waits for review: every candidate is released
        # Real server time on a clip is milliseconds here: the speed rule would exclude everyone;
        # the erratic raters rate at random, which the agreement rule would exclude mid-session
        # (here it only flags, so every rater completes the same session with and without repeats).
        **{"qc_rules": {"too_fast": False, "low_agreement": {"action": "flag"}}, **options},
    )
    return campaign


def _by_position(campaign: Campaign, *fields: str) -> list[tuple[Any, ...]]:
    return list(
        CampaignCandidate.objects.filter(campaign=campaign).order_by("id").values_list(*fields)
    )


def _records(release: Any, split: str) -> list[dict[str, Any]]:
    """The release's records less the campaign's slug (the one field that must differ)."""
    records = jsonl_records(release, split)
    return [
        {key: value for key, value in record.items() if key != "campaign"} for record in records
    ]


def _payments(campaign: Campaign) -> list[tuple[Any, ...]]:
    return sorted(
        (row.external_id, row.status, row.assignments_submitted, row.active_ms, row.amount)
        for row in payments_rows(campaign=campaign)
    )


def test_repeats_are_served_apart_measured_and_change_no_count_payment_aggregate_or_release():
    clips = clips_with_candidates(clips=CLIPS, candidates_per_clip=CANDIDATES)
    with_repeats = _campaign("retest-on", clips, retest_share=SHARE, retest_min_gap=GAP)
    without = _campaign("retest-off", clips)
    raters = _crowd(with_repeats)
    plain = _crowd(without)

    # Serving: each worker saw every clip once as an original, and some again; never the same clip
    # twice in a row, each repeat at least GAP other clips after the first time, once at most.
    for rater in raters:
        originals = [
            clip for clip, repeat in zip(rater.clips, rater.repeat_flags, strict=True) if not repeat
        ]
        repeated = [
            clip for clip, repeat in zip(rater.clips, rater.repeat_flags, strict=True) if repeat
        ]
        assert sorted(originals) == sorted(clip.pk for clip in clips)
        assert len(repeated) == len(set(repeated)) >= 2
        assert all(a != b for a, b in zip(rater.clips, rater.clips[1:], strict=False))
        for index, (clip, repeat) in enumerate(zip(rater.clips, rater.repeat_flags, strict=True)):
            if repeat:
                first = rater.clips.index(clip)
                assert index - first - 1 >= GAP
                # Due only when the share allows it: repeats so far <= share x originals so far.
                done = index - sum(rater.repeat_flags[:index])
                assert sum(rater.repeat_flags[: index + 1]) <= int(SHARE * done)
        assert not rater.repeat_flags[-1]  # a repeat never prolongs the session
    assert all(not any(rater.repeat_flags) for rater in plain)
    repeats = Repeat.objects.filter(campaign=with_repeats)
    assert repeats.count() == sum(sum(rater.repeat_flags) for rater in raters)
    # One id space: a repeat's id is no existing assignment's.
    assert not Assignment.objects.filter(pk__in=repeats.values("pk")).exists()
    assert (
        RepeatJudgment.objects.filter(campaign=with_repeats).count() == CANDIDATES * repeats.count()
    )

    # Counts, payments and progress read no repeat.
    for campaign in (with_repeats, without):
        assert Judgment.objects.filter(campaign=campaign).count() == 4 * CLIPS * CANDIDATES
        for participation in Participation.objects.filter(campaign=campaign):
            assert participation.assignments_submitted == CLIPS
            assert participation.active_ms_total == 5000 * CLIPS
    assert _payments(with_repeats) == _payments(without)
    assert _by_position(with_repeats, "slots_taken", "judgments_total", "quota") == _by_position(
        without, "slots_taken", "judgments_total", "quota"
    )
    for rater in raters:
        me = rater.client.get("/api/v1/worker/me").json()
        assert (me["state"], me["assignments_done"]) == ("finished", CLIPS)

    # QC (the retest rule off, its default), aggregates, agreement: the same.
    for campaign in (with_repeats, without):
        run = qc_run_inline(campaign=campaign)
        assert run.status == "succeeded", run.error
    fields = ("kept_judgments", "means", "overall", "rating_range", "is_finalised", "review_state")
    assert _by_position(with_repeats, *fields) == _by_position(without, *fields)
    assert campaign_agreement(campaign=with_repeats) == campaign_agreement(campaign=without)
    assert not any(
        flag["rule"] == "inconsistent_retest"
        for flags in WorkerQCStats.objects.values_list("flags", flat=True)
        for flag in flags
    )

    # Releases: the same records; the card and manifest of the one with repeats report them.
    release_on = build(campaigns=[with_repeats], seed=7)
    release_off = build(campaigns=[without], seed=7)
    assert release_on.counts["splits"] == release_off.counts["splits"]
    assert len(_records(release_on, "train")) > CLIPS
    for split in ("train", "validation"):
        assert _records(release_on, split) == _records(release_off, split)
    figures = campaign_retest(campaign=with_repeats)
    facts = manifest(release_on)["retest"]
    assert manifest(release_off)["retest"] == []
    assert [entry["campaign"] for entry in facts] == ["retest-on"]
    assert facts[0]["pairs"] == figures["pairs"] == CANDIDATES * repeats.count()
    for name in ("worker_kappa_mean", "worker_kappa_median", "workers_with_kappa", "pooled_kappa"):
        assert facts[0][name] == figures[name]
    card = read_file(release_on, "README.md").decode()
    assert "## Test–retest consistency (intra-rater)" in card

    def fixed(value: float | None) -> str:
        return "n/a" if value is None else f"{value:.3f}"

    for row in figures["questions"]:
        assert (
            f"| retest-on | {row['key']} | 25% | {GAP} | {row['pairs']} | "
            f"{fixed(row['worker_kappa_mean'])} | {fixed(row['worker_kappa_median'])} | "
            f"{fixed(row['pooled_kappa'])} |" in card
        )
    assert (
        "No campaign of this release served test–retest repeats."
        in read_file(release_off, "README.md").decode()
    )

    # Consistency: kappa 1 for the steady workers, low for the erratic ones (per worker and per
    # question, once they have enough pairs), and the API and the command say the same.
    campaign_update(campaign=with_repeats, qc_rules={"inconsistent_retest": {"min_pairs": 4}})
    with_repeats.refresh_from_db()
    figures = campaign_retest(campaign=with_repeats)
    rows = {row["external_id"]: row for row in figures["workers"]}
    assert set(rows) == set(CONSISTENT) | set(INCONSISTENT)
    for name in CONSISTENT:
        assert rows[name]["enough_pairs"] and rows[name]["kappa"] == pytest.approx(1.0)
        assert all(q["exact_agreement"] == 1.0 for q in rows[name]["questions"].values())
    for name in INCONSISTENT:
        assert rows[name]["enough_pairs"] and rows[name]["kappa"] < 0.5, rows[name]
    output = StringIO()
    call_command("retest", "retest-on", "--json", stdout=output)
    assert json.loads(output.getvalue()) == json.loads(json.dumps(figures))


def test_the_rule_flags_an_inconsistent_worker_only_once_they_have_enough_pairs():
    clips = clips_with_candidates(clips=CLIPS, candidates_per_clip=CANDIDATES)
    campaign = _campaign(
        "retest-rule",
        clips,
        retest_share=SHARE,
        retest_min_gap=GAP,
        qc_rules={
            "too_fast": False,
            "low_agreement": {"action": "flag"},
            "inconsistent_retest": {"enabled": True, "min_pairs": 6, "min_kappa": 0.5},
        },
    )
    ids = sorted(CampaignCandidate.objects.filter(campaign=campaign).values_list("id", flat=True))
    positions = {pk: index for index, pk in enumerate(ids)}
    steady = Rater("steady-1", consistent=True, positions=positions)
    erratic = Rater("erratic-1", consistent=False, positions=positions)
    # The second rating of every repeat differs from the first: a kappa far below 0.5.
    erratic.random = random.Random(5)
    for rater in (steady, erratic):
        rater.join(campaign.slug)

    def flagged() -> dict[str, list[str]]:
        qc_run_inline(campaign=campaign)
        return {
            stats.participation.worker.external_id: [flag["rule"] for flag in stats.flags]
            for stats in WorkerQCStats.objects.filter(
                participation__campaign=campaign
            ).select_related("participation__worker")
        }

    pairs_seen: list[int] = []
    held_back: list[bool] = []
    while True:
        served = [rater.step() for rater in (steady, erratic)]
        if served == [None, None]:
            break
        pairs = RepeatJudgment.objects.filter(
            participation__worker__external_id="erratic-1", campaign=campaign
        ).count()
        if pairs in pairs_seen:
            continue
        pairs_seen.append(pairs)
        figures = {row["external_id"]: row for row in campaign_retest(campaign=campaign)["workers"]}
        flags = flagged()
        if pairs < 6:
            assert "inconsistent_retest" not in flags.get("erratic-1", [])
            assert pairs == 0 or figures["erratic-1"]["kappa"] is None
            if pairs:
                # Not because the few pairs look consistent: the gate held the rule back.
                erratic_id = Participation.objects.get(
                    campaign=campaign, worker__external_id="erratic-1"
                ).pk
                _pairs, raw = worker_retest_figures(
                    campaign=campaign, participation_ids=np.asarray([erratic_id])
                )
                held_back.append(float(raw[0]) < 0.5)
        else:
            kappa = figures["erratic-1"]["kappa"]
            assert ("inconsistent_retest" in flags["erratic-1"]) == (kappa < 0.5), kappa
        assert "inconsistent_retest" not in flags.get("steady-1", [])
    assert pairs_seen[-1] >= 6
    assert any(held_back), "no stage had few pairs with a kappa the rule would have flagged"
    assert "inconsistent_retest" in flagged()["erratic-1"]


def _ratings(candidate_ids: list[int], value: int = 3) -> dict[str, Any]:
    keys = ("descriptiveness", "relevance", "fluency")
    return {"ratings": [{"candidate_id": pk, **dict.fromkeys(keys, value)} for pk in candidate_ids]}


def test_a_repeat_is_a_lease_like_any_other_reload_expiry_late_submit_and_strangers():
    clips = clips_with_candidates(clips=6, candidates_per_clip=2)
    campaign = _campaign("retest-lease", clips, retest_share=0.5, retest_min_gap=1)
    _token, participation = crowd_join(campaign, "lease-worker")
    _other_token, stranger = crowd_join(campaign, "stranger")
    start = timezone.now()
    first_clips = []
    for minute in range(2):
        offer = assignment_claim_next(participation=participation, now=start)
        payload = assignment_offer_payload(offer=offer, campaign=campaign)
        first_clips.append((payload["clip"]["id"], {c["id"] for c in payload["candidates"]}))
        assignment_submit(
            participation=participation,
            assignment_id=offer.assignment_id,
            body=_ratings([c["id"] for c in payload["candidates"]]),
            now=start + timedelta(minutes=minute),
        )
    now = start + timedelta(minutes=3)
    repeat = assignment_claim_next(participation=participation, now=now)
    payload = assignment_offer_payload(offer=repeat, campaign=campaign)
    # Due after two clips at 0.5; gap 1 and "never the last clip" leave only the first clip.
    assert Repeat.objects.filter(pk=repeat.assignment_id).exists()
    assert (payload["clip"]["id"], {c["id"] for c in payload["candidates"]}) == first_clips[0]
    assert set(payload) == {
        "assignment_id",
        "expires_at",
        "clip",
        "references",
        "candidates",
        "questions",
    }
    # A reload hands the same lease back; /me names it.
    assert (
        assignment_claim_next(participation=participation, now=now).assignment_id
        == repeat.assignment_id
    )
    assert (
        participation_progress(participation=participation)["live_assignment_id"]
        == repeat.assignment_id
    )
    # Another worker cannot submit it; a body for other candidates is refused; nothing stored.
    with pytest.raises(AssignmentNotFound):
        assignment_submit(
            participation=stranger, assignment_id=repeat.assignment_id, body=_ratings([1])
        )
    with pytest.raises(SubmissionInvalid):
        assignment_submit(
            participation=participation, assignment_id=repeat.assignment_id, body=_ratings([1])
        )
    assert not RepeatJudgment.objects.exists()

    # The lease runs out: the next claim marks it expired and serves a fresh clip (one repeat was
    # due, one was served), taking slots as usual.
    later = now + timedelta(seconds=campaign.lease_seconds + 1)
    fresh = assignment_claim_next(participation=participation, now=later)
    assert Repeat.objects.get(pk=repeat.assignment_id).status == "expired"
    assert Assignment.objects.filter(pk=fresh.assignment_id, participation=participation).exists()
    # A late submit of the expired repeat is still stored (it holds no slot that could be gone),
    # and moves no counter.
    outcome = assignment_submit(
        participation=participation,
        assignment_id=repeat.assignment_id,
        body=_ratings([c["id"] for c in payload["candidates"]], value=4),
        now=later,
    )
    assert outcome.created and outcome.result["assignment_id"] == repeat.assignment_id
    assert outcome.result["judgments"] == CANDIDATES
    assert RepeatJudgment.objects.filter(repeat_id=repeat.assignment_id).count() == CANDIDATES
    participation.refresh_from_db()
    assert participation.assignments_submitted == 2
    assert Judgment.objects.filter(participation=participation).count() == 2 * CANDIDATES


def test_when_a_repeat_is_due_and_which_clip_it_may_be():
    assert not repeats_due(share=0.25, submitted=3, served=0)
    assert repeats_due(share=0.25, submitted=4, served=0)
    assert not repeats_due(share=0.25, submitted=7, served=1)
    assert repeats_due(share=0.3, submitted=10, served=2)  # 3 due, whichever way 0.3 * 10 rounds
    assert not repeats_due(share=0.0, submitted=100, served=0)
    newest_first = [(14, 4), (13, 3), (12, 2), (11, 1)]
    for _ in range(20):
        chosen = repeat_clip_choose(submitted=newest_first, repeated={1}, last_clip=4, gap=2)
        assert chosen == (12, 2)  # clips 4 and 3 too recent, clip 1 already repeated
    assert repeat_clip_choose(submitted=newest_first, repeated=set(), last_clip=1, gap=3) is None
