"""verify_release finds tampered, missing and unexpected files; releases compare in SQL."""

from __future__ import annotations

import io
import json
from pathlib import Path

import pytest
from django.core.management import call_command

from annotation.models import CampaignCandidate
from datasets_app.models import CandidateCaption, Clip
from export.selectors import release_compare
from tests.export.builders import build_campaign
from tests.export.helpers import build, eligible, jsonl_records, release_root


def verify(release_id: int) -> tuple[int, dict]:  # type: ignore[type-arg]
    out = io.StringIO()
    try:
        call_command("verify_release", str(release_id), "--json", stdout=out)
        code = 0
    except SystemExit as exit:
        code = int(exit.code or 0)
    return code, json.loads(out.getvalue())


def test_verify_release_detects_tampered_missing_and_unexpected_files(db):
    data = build_campaign(slug="verify", clips=12, workers=6)
    release = build(campaigns=[data.campaign], seed=1)
    root = release_root(release)
    assert verify(release.pk) == (0, {"ok": True, "mismatches": []})

    original = (root / "data/train.jsonl").read_bytes()
    tampered = original.replace(b'"judgments":3', b'"judgments":4', 1)
    assert tampered != original
    (root / "data/train.jsonl").write_bytes(tampered)
    (root / "csv/validation.csv").unlink()
    (root / "extra.txt").write_text("not part of the release")
    code, result = verify(release.pk)
    assert code == 1
    assert result["ok"] is False
    by_path = {item["path"]: item for item in result["mismatches"]}
    assert set(by_path) == {"data/train.jsonl", "csv/validation.csv", "extra.txt"}
    assert by_path["data/train.jsonl"]["problem"] == "sha256 differs"
    assert by_path["data/train.jsonl"]["expected"] == release.files["data/train.jsonl"]
    assert by_path["csv/validation.csv"]["problem"] == "missing"
    assert by_path["extra.txt"]["problem"] == "unexpected file"

    (root / "data/train.jsonl").write_bytes(original)
    manifest = json.loads((root / "manifest.json").read_text())
    manifest["files"]["README.md"] = "0" * 64
    (root / "manifest.json").write_text(json.dumps(manifest))
    code, result = verify(release.pk)
    problems = {(item["path"], item["problem"]) for item in result["mismatches"]}
    assert ("manifest.json", "sha256 differs") in problems
    assert ("manifest.json", "manifest file list differs from the database") in problems


def test_compare_reports_added_removed_changed_and_moved_candidates(db):
    data = build_campaign(slug="compare", clips=30, workers=8, excluded_worker=False)
    first = build(campaigns=[data.campaign], seed=3)
    items = eligible(data.campaign)

    rescored = items[:2]
    class_changes = 0
    for item in rescored:
        new_overall = 1.0 if item.overall > 3 else 5.0
        class_changes += int(item.training_class != int(new_overall))
        item.overall, item.training_class = new_overall, int(new_overall)
        item.means = dict.fromkeys(item.means, new_overall)
        item.normalized = (new_overall - 1) / 4
        item.save()
    removed = items[2]
    removed.dropped = True
    removed.save()
    new_clip = Clip.objects.create(
        vatex_id="zzznew_000001_000011", youtube_id="zzznew", start_seconds=1, end_seconds=11
    )
    for position, clip in enumerate((items[5].candidate.clip, new_clip)):
        candidate = CandidateCaption.objects.create(
            clip=clip, external_id=f"compare:new:{position}", text="a brand new caption"
        )
        CampaignCandidate.objects.create(
            campaign=data.campaign,
            candidate=candidate,
            clip=clip,
            quota=3,
            kept_judgments=3,
            means=dict.fromkeys(data.campaign.question_keys, 2.0),
            overall=2.0,
            normalized=0.25,
            training_class=2,
            is_finalised=True,
        )
    second = build(campaigns=[data.campaign], seed=3)

    def splits(release):  # type: ignore[no-untyped-def]
        return {
            record["candidate_id"]: split
            for split in ("train", "validation")
            for record in jsonl_records(release, split)
        }

    before, after = splits(first), splits(second)
    moved = [key for key in before.keys() & after.keys() if before[key] != after[key]]
    comparison = release_compare(release=second, other=first, examples=10)
    summary = comparison["summary"]
    assert summary["added"] == 2 == len(after.keys() - before.keys())
    assert summary["removed"] == 1 == len(before.keys() - after.keys())
    assert summary["in_both"] == len(before.keys() & after.keys())
    assert summary["score_changed"] == 2
    assert summary["class_changed"] == class_changes
    assert summary["moved_between_splits"] == len(moved)
    assert sum(move["candidates"] for move in summary["split_moves"]) == len(moved)
    assert sum(summary["shift_histogram"].values()) == 2
    assert summary["largest_shift"] == pytest.approx(
        max(abs(r["new_overall"] - r["old_overall"]) for r in comparison["largest_changes"][:2])
    )
    assert {entry["candidate_id"] for entry in comparison["added"]} == {
        "compare:new:0",
        "compare:new:1",
    }
    assert [entry["candidate_id"] for entry in comparison["removed"]] == [
        removed.candidate.external_id
    ]
    assert second.previous_id == first.pk
    assert second.changes == summary


def test_release_files_are_written_under_the_storage_root(db, settings):
    data = build_campaign(slug="where", clips=8, workers=6)
    release = build(campaigns=[data.campaign], seed=1)
    assert release.location == str(Path(settings.MEDIA_ROOT) / "releases" / str(release.pk))
    assert release.storage_prefix == f"releases/{release.pk}"
    assert sorted(p.name for p in (Path(settings.MEDIA_ROOT) / "releases").iterdir()) == [
        str(release.pk)
    ]
