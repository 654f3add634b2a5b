"""The dataset card's statistics and the manifest, checked against an independent computation
from the database (and, for agreement, against the `krippendorff` package)."""

from __future__ import annotations

import hashlib
import re
from collections import defaultdict

import krippendorff
import numpy as np
import pytest

from annotation.models import AuditEntry, Judgment, ReviewAction
from datasets_app.models import ImportBatch, ImportKind, ReferenceCaption
from export.builder import code_version
from tests.export.builders import build_campaign
from tests.export.helpers import all_bytes, build, jsonl_records, manifest, read_file
from tests.export.test_release_files import eligible


def words(text: str) -> list[str]:
    return re.findall(r"[a-z]+", text.lower())  # the test data is ASCII


def test_card_statistics_equal_an_independent_computation(db):
    data = build_campaign(slug="card", clips=40, workers=9, candidates_per_clip=(1, 6))
    release = build(campaigns=[data.campaign], seed=4)
    items = eligible(data.campaign)
    split_of = {
        record["candidate_id"]: split
        for split in ("train", "validation")
        for record in jsonl_records(release, split)
    }

    per_clip: dict[int, int] = defaultdict(int)
    for item in items:
        per_clip[item.candidate.clip_id] += 1
    references = list(ReferenceCaption.objects.filter(clip_id__in=per_clip).order_by("pk"))
    kept = list(
        Judgment.objects.filter(campaign_candidate__in=items, is_excluded=False).select_related(
            "participation"
        )
    )
    kept_per_item: dict[int, int] = defaultdict(int)
    for judgment in kept:
        kept_per_item[judgment.campaign_candidate_id] += 1
    candidate_words = [word for item in items for word in words(item.candidate.text)]
    reference_words = [word for reference in references for word in words(reference.text)]

    expected_agreement = {}
    workers = sorted({judgment.participation.worker_id for judgment in kept})
    columns = {item.pk: position for position, item in enumerate(items)}
    for key in data.campaign.question_keys:
        matrix = np.full((len(workers), len(items)), np.nan)
        for judgment in kept:
            matrix[workers.index(judgment.participation.worker_id)][
                columns[judgment.campaign_candidate_id]
            ] = judgment.values[key]
        expected_agreement[key] = krippendorff.alpha(
            reliability_data=matrix, level_of_measurement="ordinal", value_domain=[1, 2, 3, 4, 5]
        )

    stats = manifest(release)["statistics"]
    assert stats == release.stats
    assert stats["clips"] == len(per_clip)
    assert stats["candidates"] == len(items)
    assert stats["candidates_per_clip"] == {
        "min": min(per_clip.values()),
        "max": max(per_clip.values()),
        "mean": len(items) / len(per_clip),
    }
    assert stats["candidate_words"] == {
        "vocabulary": len(set(candidate_words)),
        "total": len(candidate_words),
        "mean_length": len(candidate_words) / len(items),
    }
    assert stats["references"] == len(references)
    assert stats["reference_words"] == {
        "vocabulary": len(set(reference_words)),
        "total": len(reference_words),
        "mean_length": len(reference_words) / len(references),
    }
    assert stats["vocabulary_all_captions"] == len(set(candidate_words) | set(reference_words))
    assert stats["judgments"] == len(kept)
    assert stats["judgments_per_candidate"] == {
        "min": min(kept_per_item[item.pk] for item in items),
        "max": max(kept_per_item[item.pk] for item in items),
        "mean": len(kept) / len(items),
    }
    assert stats["annotators"] == len(workers)
    assert stats["imported_rater_slots"] == 0
    for key, alpha in expected_agreement.items():
        assert stats["agreement"][key]["alpha"] == pytest.approx(alpha, rel=1e-9, abs=1e-12)
        assert stats["agreement"][key]["ratings"] == len(kept)
    for split in ("train", "validation"):
        members = [item for item in items if split_of[item.candidate.external_id] == split]
        histogram = [0] * 8
        classes = [0] * 5
        for item in members:
            histogram[min(int((item.overall - 1) / 0.5), 7)] += 1
            classes[item.training_class - 1] += 1
        entry = stats["splits"][split]
        assert entry["candidates"] == len(members)
        assert entry["clips"] == len({item.candidate.clip_id for item in members})
        assert list(entry["overall_histogram"].values()) == histogram
        assert list(entry["class_histogram"].values()) == classes
        assert entry["mean_overall"] == pytest.approx(
            sum(item.overall for item in members) / len(members), rel=1e-12
        )

    card = read_file(release, "README.md").decode()
    assert card.startswith("---\nlicense: bsd-3-clause-clear\n")
    for line in (
        f"| Clips | {len(per_clip)} |",
        f"| Candidate captions | {len(items)} |",
        f"| Candidates per clip (min) | {min(per_clip.values())} |",
        f"| Candidates per clip (max) | {max(per_clip.values())} |",
        f"| Candidates per clip (mean) | {len(items) / len(per_clip):.2f} |",
        f"| Candidate vocabulary (words) | {len(set(candidate_words))} |",
        f"| Candidate total words | {len(candidate_words)} |",
        f"| Candidate mean length (words) | {len(candidate_words) / len(items):.2f} |",
        f"| Reference captions | {len(references)} |",
        f"| Reference vocabulary (words) | {len(set(reference_words))} |",
        f"| Reference total words | {len(reference_words)} |",
        f"| Reference mean length (words) | {len(reference_words) / len(references):.2f} |",
        f"| Judgments (kept) | {len(kept)} |",
        f"| Judgments per candidate (mean) | {len(kept) / len(items):.2f} |",
        f"| Annotators | {len(workers)} |",
        *(
            f"| {key} | {alpha:.4f} | {len(items)} | {len(kept)} |"
            for key, alpha in sorted(expected_agreement.items())
        ),
    ):
        assert line in card, line


def test_manifest_records_how_the_release_was_made(db):
    data = build_campaign(slug="made", clips=20, workers=8)
    batch = ImportBatch.objects.create(
        kind=ImportKind.VATEX, file_name="vatex_validation_v1.0.json", sha256="a" * 64
    )
    data.clips[0].import_batch = batch
    data.clips[0].save()
    for action in (
        ReviewAction.CLAIM,
        ReviewAction.SET_RATINGS,
        ReviewAction.SET_RATINGS,
        ReviewAction.DROP,
    ):
        AuditEntry.objects.create(campaign=data.campaign, action=action)
    release = build(campaigns=[data.campaign], seed=8, ratios=(0.8, 0.1, 0.1), name="Made v1")
    facts = manifest(release)
    excluded = data.participations[-1]

    assert facts["name"] == "Made v1"
    assert facts["seed"] == 8
    assert facts["ratios"] == {"train": 0.8, "validation": 0.1, "test": 0.1}
    assert facts["code_version"] == code_version()
    assert facts["campaigns"][0]["slug"] == "made"
    assert facts["campaigns"][0]["quality_control"]["qc_rules"] == data.campaign.qc_rules
    assert facts["campaigns"][0]["quality_control"]["review_range_threshold"] == 3
    [worker] = facts["quality_control"]["excluded_workers"]
    assert worker["campaign"] == "made"
    assert re.fullmatch(r"w_[0-9a-f]{16}", worker["worker"])
    assert worker["rules"] == ["too_fast", "uniform"]
    assert worker["decided_by"] == "rules"
    assert worker["reasons"] == ["median 1.2 s per candidate"]
    assert worker["judgments_excluded"] == excluded.judgments.filter(is_excluded=True).count() > 0
    assert facts["quality_control"]["judgment_exclusions"] == {
        "made": {"rule:too_fast": Judgment.objects.filter(is_excluded=True).count()}
    }
    assert facts["review"] == {
        "decisions": 3,
        "actions_by_campaign": {"made": {"claim": 1, "drop": 1, "set_ratings": 2}},
    }
    assert facts["sources"] == [
        {"kind": "vatex", "file_name": "vatex_validation_v1.0.json", "sha256": "a" * 64}
    ]
    contents = all_bytes(release)
    assert facts["files"] == {
        relative: hashlib.sha256(content).hexdigest()
        for relative, content in contents.items()
        if relative != "manifest.json"
    }
    assert "NOTICE.md" not in release.files
    card = contents["README.md"].decode()
    assert "Creative Commons Attribution 4.0 International (CC BY 4.0)" in card
    assert "EMScore" not in card
    assert "| test |" in card
