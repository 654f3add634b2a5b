"""The release's explanation set (export.explanations, `explanations.jsonl`): per released
candidate and per criterion, the kept judgments' reasons with the rating, only where raw judgments
are released; listed in the manifest and described by the card."""

from __future__ import annotations

import json

from annotation.models import Judgment
from tests.export.builders import build_campaign
from tests.export.helpers import build, eligible, jsonl_records, manifest, read_file


def test_explanations_are_the_workers_reasons_per_candidate_and_criterion(db):
    data = build_campaign(slug="explained", clips=10, workers=6)
    campaign = data.campaign
    campaign.reason_required_at_or_below = 2
    campaign.save(update_fields=["reason_required_at_or_below"])
    # One long reason with a quote and a non-ASCII character, kept as written (trimmed).
    first = Judgment.objects.filter(campaign=campaign, is_excluded=False).exclude(reason="").first()
    assert first is not None
    first.reason = '  the "dog" is a cat — wrong  '
    first.save(update_fields=["reason"])
    release = build(campaigns=[campaign], seed=4, include_raw_judgments=True)

    lines = read_file(release, "explanations.jsonl").decode().splitlines()
    assert manifest(release)["files"]["explanations.jsonl"] == release.files["explanations.jsonl"]
    records = [json.loads(line) for line in lines]
    for line, record in zip(lines, records, strict=True):
        assert line == json.dumps(record, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    split_of = {
        r["candidate_id"]: split
        for split in ("train", "validation")
        for r in jsonl_records(release, split)
    }
    keys = campaign.question_keys
    expected = {}
    for item in eligible(campaign):
        candidate = item.candidate
        if candidate.external_id not in split_of:
            continue
        kept = list(
            Judgment.objects.filter(campaign_candidate=item, is_excluded=False)
            .exclude(reason="")
            .order_by("pk")
        )
        if not kept:
            continue
        expected[candidate.external_id] = {
            "campaign": "explained",
            "candidate_id": candidate.external_id,
            "clip_id": candidate.clip.vatex_id,
            "overall": item.overall,
            "split": split_of[candidate.external_id],
            "text": candidate.text,
            "criteria": {
                key: [
                    {
                        "prompted": judgment.values[key] <= 2,
                        "rating": judgment.values[key],
                        "reason": judgment.reason.strip(),
                        "worker": None,  # compared below: the raw judgments' pseudonym
                    }
                    for judgment in kept
                ]
                for key in keys
            },
        }
    assert expected and len(records) == len(expected)
    raw = {
        r["candidate_id"]: r["raw_judgments"]
        for split in ("train", "validation")
        for r in jsonl_records(release, split)
    }
    for record in records:
        want = expected[record["candidate_id"]]
        pseudonyms = [j["worker"] for j in raw[record["candidate_id"]] if j["reason"].strip()]
        for key in keys:
            for entry, worker in zip(want["criteria"][key], pseudonyms, strict=True):
                entry["worker"] = worker
        assert record == want
    assert any(
        e["reason"] == 'the "dog" is a cat — wrong' for r in records for e in r["criteria"][keys[0]]
    )
    # File order: the split files' order.
    order = [
        r["candidate_id"]
        for split in ("train", "validation")
        for r in jsonl_records(release, split)
    ]
    positions = [order.index(r["candidate_id"]) for r in records]
    assert positions == sorted(positions)

    card = read_file(release, "README.md").decode()
    assert "explanations.jsonl" in card
    assert f"{len(records)} candidates" in card


def test_no_explanations_without_raw_judgments(db):
    data = build_campaign(slug="private", clips=6, workers=6)
    release = build(campaigns=[data.campaign], seed=4, include_raw_judgments=False)
    assert "explanations.jsonl" not in release.files
    assert "explanations.jsonl" not in read_file(release, "README.md").decode()
