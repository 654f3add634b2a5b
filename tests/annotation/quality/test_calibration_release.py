"""Calibrated scores in releases: new columns beside the raw means (which do not change), and the
model with its fit statistics in the dataset card and the manifest."""

from __future__ import annotations

from io import StringIO

import pytest
from django.core.management import call_command

from annotation.models import CandidateCalibration
from tests.export.builders import build_campaign
from tests.export.helpers import all_bytes, build, jsonl_records, manifest

pytestmark = pytest.mark.django_db


def test_a_release_carries_calibrated_scores_beside_unchanged_raw_means_and_the_fit_in_its_card():
    data = build_campaign(slug="cal-release", clips=20, workers=8)
    before = build(campaigns=[data.campaign], seed=3, name="before")
    raw_before = {record["candidate_id"]: record for record in jsonl_records(before, "train")}
    # Not calibrated: the records keep their format (no calibrated fields at all).
    assert all("calibrated_overall" not in record for record in raw_before.values())
    assert all("calibrated_scores" not in record for record in raw_before.values())
    assert (
        "No campaign of this release has been calibrated" in all_bytes(before)["README.md"].decode()
    )

    call_command("calibrate", "cal-release", "--json", stdout=StringIO(), stderr=StringIO())
    after = build(campaigns=[data.campaign], seed=3, name="after")
    calibrations = {
        row.campaign_candidate.candidate.external_id: row
        for row in CandidateCalibration.objects.select_related("campaign_candidate__candidate")
    }
    records = jsonl_records(after, "train")
    assert records
    for record in records:
        old = raw_before[record["candidate_id"]]
        # The raw columns are byte-for-byte what they were.
        for name in ("scores", "overall", "normalized", "training_class", "judgments"):
            assert record[name] == old[name]
        stored = calibrations[record["candidate_id"]]
        assert record["calibrated_overall"] == stored.overall
        assert record["calibrated_scores"] == {
            key: stored.scores[key] for key in sorted(record["scores"])
        }
        assert 1.0 <= record["calibrated_overall"] <= 5.0

    facts = manifest(after)
    [entry] = facts["calibration"]
    assert entry["campaign"] == "cal-release"
    assert set(entry["questions"]) == set(data.campaign.question_keys)
    fit = entry["questions"]["relevance"]
    # Eight workers, one of them excluded by QC: seven raters with kept judgments.
    assert fit["raters"] == 7 and fit["converged"] is True and len(fit["thresholds"]) == 4
    assert "seconds" not in fit  # nothing that varies between identical builds
    card = all_bytes(after)["README.md"].decode()
    assert "## Calibrated scores (rater severity)" in card
    assert (
        f"| cal-release | relevance | {fit['judgments']} | 7 | {fit['items']} | "
        f"{fit['severity_sd']:.3f} | {fit['severity_reliability']:.3f} |"
    ) in card
    # Same database state, same seed: the same bytes, calibration included.
    again = build(campaigns=[data.campaign], seed=3, name="after")
    assert all_bytes(again) == all_bytes(after)
