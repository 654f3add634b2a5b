"""Judgment allocation in a release (issue 28, point 4): each record's kept judgments, why it stopped
(`stop_reason`) and the rules that opened more (`opened_by`) in every format; the card and the
manifest state each campaign's policy, its parameters and metric, and the stop reasons' counts."""

from __future__ import annotations

import json

import datasets

from annotation.allocation import AdaptivePolicy
from annotation.models import Campaign, CampaignCandidate, ReviewState
from tests.export.builders import aggregate, build_campaign
from tests.export.helpers import (
    build,
    csv_rows,
    eligible,
    jsonl_records,
    manifest,
    parquet_rows,
    read_file,
    release_root,
)

POLICY = AdaptivePolicy(
    minimum=2,
    maximum=5,
    disagreement_range=2,
    standard_error_threshold=0.4,
    metric_disagreement_threshold=1.0,
)
# What the slot engine would have left on a candidate: (kept judgments, stop reason, opened by,
# resolved by an expert). The last one was resolved before the policy stopped asking.
SCENARIOS = (
    (2, "settled", [], False),
    (5, "maximum", ["range", "metric"], False),
    (3, "review", ["standard_error", "range"], True),
    (4, "", ["range"], True),
)
SPLITS = ("train", "validation")


def adaptive_campaign() -> tuple[Campaign, dict[str, tuple[int, str, list[str]]]]:
    """A campaign of five judgments per candidate, turned adaptive: each released candidate keeps
    the judgments of its scenario (the others deleted), its quota and aggregates to match, and the
    stop reason and opened_by the slot engine writes. Returns the campaign and, by candidate, the
    expected (judgments, stop reason, opened by)."""
    data = build_campaign(
        slug="adaptive",
        clips=16,
        quota=5,
        workers=7,
        controls=0,
        below_quota=0,
        under_review=0,
        dropped=0,
        resolved=0,
        excluded_worker=False,
    )
    data.campaign.allocation = POLICY.as_dict()
    data.campaign.metric = "plugin:clipscore"
    data.campaign.save(update_fields=["allocation", "metric"])
    keys = data.campaign.question_keys
    expected = {}
    items = CampaignCandidate.objects.filter(campaign=data.campaign).order_by("pk")
    for index, item in enumerate(items.select_related("candidate")):
        kept, reason, opened, resolved = SCENARIOS[index % len(SCENARIOS)]
        judgments = list(item.judgments.order_by("pk"))
        for judgment in judgments[kept:]:
            judgment.delete()
        values = [judgment.values for judgment in judgments[:kept]]
        item.quota = item.slots_taken = item.judgments_total = item.kept_judgments = kept
        item.means, item.overall = aggregate(values, keys)
        if resolved:
            item.review_state = ReviewState.RESOLVED
            item.resolution = {"values": item.means}
        item.normalized = (item.overall - 1) / 4
        item.training_class = int(item.overall + 0.5)
        item.stop_reason, item.opened_by = reason, opened
        item.save()
        expected[item.candidate.external_id] = (kept, reason, opened)
    assert len(expected) == len(eligible(data.campaign))  # every one of them is released
    return data.campaign, expected


def test_an_adaptive_release_records_judgments_stop_reasons_and_opened_by_in_every_format(
    db, tmp_path
):
    campaign, expected = adaptive_campaign()
    # A fixed campaign beside it: no opened rules, its stop reasons derived from the kept ratings.
    fixed = build_campaign(slug="fixedmix", clips=8, workers=6, dropped=0, under_review=0)
    release = build(campaigns=[fixed.campaign, campaign], seed=2)

    seen: dict[str, tuple[int, str, list[str]]] = {}
    for split in SPLITS:
        records = jsonl_records(release, split)
        assert parquet_rows(release, split) == records
        rows = csv_rows(release, split)
        assert [row["candidate_id"] for row in rows] == [r["candidate_id"] for r in records]
        for record, row in zip(records, rows, strict=True):
            facts = (record["judgments"], record["stop_reason"], record["opened_by"])
            assert (row["judgments"], row["stop_reason"], row["opened_by"]) == (
                str(facts[0]),
                facts[1],
                json.dumps(facts[2]).replace(" ", ""),
            )
            if record["campaign"] == "adaptive":
                seen[record["candidate_id"]] = facts
            else:
                assert record["opened_by"] == []
                assert record["stop_reason"] in ("maximum", "review", "")
    assert seen == expected
    # Hugging Face `datasets` types the new columns the same from the JSONL and the Parquet.
    loaded = {
        kind: datasets.load_dataset(
            kind,
            data_files={
                split: str(release_root(release) / f"{folder}/{split}.{extension}")
                for split in SPLITS
            },
            cache_dir=str(tmp_path / "hf-cache"),
        )
        for kind, folder, extension in (
            ("json", "data", "jsonl"),
            ("parquet", "parquet", "parquet"),
        )
    }
    assert loaded["json"]["train"].features == loaded["parquet"]["train"].features
    assert str(loaded["json"]["train"].features["opened_by"]) == "List(Value('string'))"

    counts = {reason: 0 for reason in ("settled", "maximum", "review", "")}
    opened = {rule: 0 for rule in ("range", "standard_error", "metric")}
    for _, reason, rules in expected.values():
        counts[reason] += 1
        for rule in rules:
            opened[rule] += 1
    assert all(counts.values()) and all(opened.values())
    fixed_reasons = {"settled": 0, "maximum": 0, "review": 0, "": 0}
    for split in SPLITS:
        for record in jsonl_records(release, split):
            if record["campaign"] == "fixedmix":
                fixed_reasons[record["stop_reason"]] += 1
    assert fixed_reasons["maximum"] > 0
    assert fixed_reasons["settled"] == 0  # the fixed policy never settles early

    card = read_file(release, "README.md").decode()
    assert (
        "| `adaptive` | adaptive | minimum 2, maximum 5; one more at a time while the kept "
        "ratings' range is 2 or more or the calibrated score's standard error is above 0.4 or "
        "the metric's score is further from the crowd's mean than 1.0 plus the metric's "
        "uncertainty; review at a rating range of 3 or more | `plugin:clipscore` |"
    ) in card
    assert (
        "| `fixedmix` | fixed | 3 judgments per candidate; review at a rating range of 3 or more "
        "| none |"
    ) in card
    row = " | ".join(
        str(number)
        for number in (
            counts["settled"],
            counts["maximum"],
            counts["review"],
            counts[""],
            opened["range"],
            opened["standard_error"],
            opened["metric"],
        )
    )
    assert f"| `adaptive` | {row} |" in card
    fixed_row = " | ".join(
        str(fixed_reasons[reason]) for reason in ("settled", "maximum", "review", "")
    )
    assert f"| `fixedmix` | {fixed_row} | 0 | 0 | 0 |" in card
    assert "`normalized`, `opened_by` (the rules that opened more judgments" in card

    assert manifest(release)["allocation"] == [
        {
            "campaign": "adaptive",
            "policy": POLICY.as_dict(),
            "metric": "plugin:clipscore",
            "stop_reasons": {
                "settled": counts["settled"],
                "maximum": counts["maximum"],
                "review": counts["review"],
                "open": counts[""],
            },
            "opened_by": opened,
        },
        {
            "campaign": "fixedmix",
            "policy": {"kind": "fixed", "judgments": 3, "review_range_threshold": 3},
            "metric": "",
            "stop_reasons": {
                "settled": 0,
                "maximum": fixed_reasons["maximum"],
                "review": fixed_reasons["review"],
                "open": fixed_reasons[""],
            },
            "opened_by": {"range": 0, "standard_error": 0, "metric": 0},
        },
    ]
