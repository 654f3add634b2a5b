"""A simulated crowd driven through the worker API (join → next → submit), with planted spammers
of each kind among twenty honest workers.

Time is simulated: before each submit the assignment's `issued_at` is moved back by the time the
simulated person spent on it, so the server measures exactly that (the one thing we fake; the
engine, the API, the after-submission task and the QC run are the real ones). The Celery task
`annotation.after_submission` is called in-process after each submit, as the worker would.
"""

from __future__ import annotations

import json
import random
from datetime import timedelta
from io import StringIO

import pytest
from django.core.management import call_command
from rest_framework.test import APIClient

from annotation.models import (
    Assignment,
    AssignmentStatus,
    CampaignCandidate,
    Participation,
    ParticipationStatus,
)
from annotation.quality.controls import controls_generate
from annotation.tasks import after_submission
from datasets_app.models import ControlType
from tests.annotation.crowd_factories import crowd_campaign

pytestmark = pytest.mark.django_db

NEXT = "/api/v1/worker/assignments/next"
CLIPS = 64
KEYS = ("descriptiveness", "relevance", "fluency")


class SimulatedWorker:
    def __init__(self, name: str, kind: str, generator: random.Random) -> None:
        self.name, self.kind, self.random = name, kind, generator
        self.client = APIClient()
        self.done = False

    def join(self, slug: str) -> None:
        response = self.client.post(
            f"/api/v1/campaigns/{slug}/join",
            {
                "platform": "prolific",
                "external_id": self.name,
                "study_id": "study-1",
                "session_id": f"session-{self.name}",
            },
            format="json",
        )
        assert response.status_code in (200, 201), response.content
        self.client.credentials(HTTP_AUTHORIZATION=f"Worker {response.json()['worker_token']}")

    def seconds_on(self, candidates: int) -> float:
        if self.kind == "too_fast":
            return self.random.uniform(0.6, 1.2)
        return self.random.uniform(12, 40) * (0.6 + 0.15 * candidates)

    def rate(self, latent: dict[str, float]) -> dict[str, int]:
        if self.kind == "uniform":
            return dict.fromkeys(KEYS, 4)
        if self.kind == "random":
            return {key: self.random.randint(1, 5) for key in KEYS}
        if self.kind == "yes_sayer":  # fails the controls that expect low ratings
            return {key: self.random.randint(4, 5) for key in KEYS}
        # honest and too_fast: the candidate's quality plus a person's noise
        return {key: min(5, max(1, round(latent[key] + self.random.gauss(0, 0.6)))) for key in KEYS}

    def step(self, truth: dict[int, dict[str, float]]) -> bool:
        """One next → submit cycle; False when the API has nothing left for this worker."""
        response = self.client.post(NEXT, {}, format="json")
        if response.status_code == 403:
            # Excluded by QC: the screen-out from the next request on; the test's end checks who.
            assert response.json()["state"] == "screened_out", response.content
            self.done = True
            return False
        if response.status_code == 204:
            self.done = True
            return False
        assert response.status_code == 200, response.content
        payload = response.json()
        # The engine shows the candidates in a fresh random order (SystemRandom, not seedable):
        # rated in that order, the seeded generator's draws fell on different candidates from
        # one run to the next, so a seed did not fix the crowd (the random-raters test failed
        # in 1 run of 20 with the same seed). Rated in id order, the seed decides everything.
        candidates = sorted(payload["candidates"], key=lambda candidate: candidate["id"])
        spent = self.seconds_on(len(candidates))
        Assignment.objects.filter(pk=payload["assignment_id"]).update(
            issued_at=Assignment.objects.get(pk=payload["assignment_id"]).issued_at
            - timedelta(seconds=spent)
        )
        ratings = [
            {"candidate_id": candidate["id"], **self.rate(truth[candidate["id"]])}
            for candidate in candidates
        ]
        submitted = self.client.post(
            f"/api/v1/worker/assignments/{payload['assignment_id']}/submit",
            {
                "ratings": ratings,
                "client_timing": {"active_ms": int(spent * 1000), "video_played_ms": 1500},
            },
            format="json",
        )
        assert submitted.status_code == 201, submitted.content
        after_submission(payload["assignment_id"])
        return True


def _truth(campaign, generator: random.Random) -> dict[int, dict[str, float]]:
    """What a careful person would answer, per campaign candidate."""
    truth = {}
    for item in CampaignCandidate.objects.filter(campaign=campaign).select_related("candidate"):
        control = item.candidate.control_type
        if control == ControlType.REFERENCE:
            truth[item.pk] = dict.fromkeys(KEYS, 4.8)
        elif control == ControlType.OTHER_CLIP:
            truth[item.pk] = {"descriptiveness": 1.3, "relevance": 1.2, "fluency": 4.6}
        elif control == ControlType.SHUFFLED:
            truth[item.pk] = {"descriptiveness": 2.8, "relevance": 3.0, "fluency": 1.3}
        else:
            truth[item.pk] = {key: generator.uniform(1.5, 4.7) for key in KEYS}
    return truth


def test_planted_spammers_are_excluded_and_every_candidate_reaches_its_quota_of_kept_judgments():
    generator = random.Random(20240611)
    campaign = crowd_campaign(clips=CLIPS, candidates_per_clip=3, judgments_per_candidate=3)
    created = controls_generate(campaign=campaign, rate=0.75, seed=3)
    assert created == CLIPS * 3 // 4
    truth = _truth(campaign, generator)

    spammers = {
        "spammer-fast": "too_fast",
        "spammer-uniform": "uniform",
        "spammer-random": "random",
        "spammer-controls": "yes_sayer",
    }
    workers = [SimulatedWorker(name, kind, generator) for name, kind in spammers.items()]
    workers += [SimulatedWorker(f"honest-{index:02d}", "honest", generator) for index in range(20)]
    for worker in workers:
        worker.join(campaign.slug)

    for _round in range(4):
        # Round-robin until nobody gets work; then a full QC run reopens what it excluded.
        while any([worker.step(truth) for worker in workers if not worker.done]):
            pass
        out = StringIO()
        call_command("run_qc", campaign.slug, "--json", stdout=out)
        summary = json.loads(out.getvalue())
        open_items = CampaignCandidate.objects.filter(
            campaign=campaign, kept_judgments__lt=3
        ).count()
        if open_items == 0:
            break
        for worker in workers:
            worker.done = False

    excluded = {row["worker"]: row["rules"] for row in summary["excluded"]}
    assert set(spammers) <= set(excluded), excluded
    assert "too_fast" in excluded["spammer-fast"]
    assert "uniform" in excluded["spammer-uniform"]
    assert "failed_controls" in excluded["spammer-random"]
    assert "failed_controls" in excluded["spammer-controls"]
    honest_excluded = [name for name in excluded if name.startswith("honest-")]
    assert len(honest_excluded) <= 1, excluded
    assert summary["workers"] == 24

    # Excluded workers are out of the engine and their judgments are all excluded, with reasons.
    for name in excluded:
        participation = Participation.objects.get(campaign=campaign, worker__external_id=name)
        assert participation.status == ParticipationStatus.EXCLUDED
        assert not participation.judgments.filter(is_excluded=False).exists()
        assert not participation.judgments.filter(exclusion_reason="").exists()
    assert summary["judgments_excluded"] > 0

    # Every candidate, controls included, ends with exactly its quota of kept judgments.
    rows = list(
        CampaignCandidate.objects.filter(campaign=campaign).values_list(
            "quota", "slots_taken", "kept_judgments", "is_control", "is_finalised"
        )
    )
    assert len(rows) == CLIPS * 3 + CLIPS * 3 // 4
    for quota, slots_taken, kept, is_control, finalised in rows:
        assert kept == quota == slots_taken == 3
        assert finalised is (not is_control)
    assert not Assignment.objects.filter(campaign=campaign, status=AssignmentStatus.LIVE).exists()
    assert sum(campaign.clips.values_list("open_slots", flat=True)) == 0
