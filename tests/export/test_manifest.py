"""manifest.json (export.manifest): how the release was made, checked against the database."""

from __future__ import annotations

import hashlib
import re

from annotation.models import AuditEntry, Judgment, ReviewAction
from datasets_app.models import ImportBatch, ImportKind
from export.builder import code_version
from tests.export.builders import build_campaign
from tests.export.helpers import all_bytes, build, manifest


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
    assert (
        "| VATEX clip ids, time windows and English reference captions "
        "| CC BY 4.0 (attribution) (`cc-by-4.0`) | Wang et al."
    ) in card
    assert facts["license"] == ["cc-by-4.0"]  # the curator's default and VATEX's agree
    assert [row["license"] for row in facts["licenses"]] == ["cc-by-4.0", "cc-by-4.0"]
    assert "EMScore" not in card
    assert "| test |" in card
