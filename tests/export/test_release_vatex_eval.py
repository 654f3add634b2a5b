"""A release of the shipped VATEX-EVAL judgments, imported with the real importer, read back with
Hugging Face `datasets` (JSON and Parquet)."""

from __future__ import annotations

import ast
import json

import datasets
import pytest

from annotation.imports import VATEX_EVAL_CAMPAIGN_SLUG, vatex_eval_import
from annotation.models import Campaign, CampaignCandidate
from annotation.quality.aggregation import aggregation_recompute
from tests.export.helpers import build, jsonl_records, read_file, release_root
from tests.support.processes import REPO_ROOT

VATEX_EVAL_PATH = REPO_ROOT / "data" / "vatex_eval" / "vid_cans_score_dict.json"


@pytest.mark.slow
def test_a_release_of_the_vatex_eval_import_loads_with_datasets(db, tmp_path):
    vatex_eval_import(path=VATEX_EVAL_PATH)
    campaign = Campaign.objects.get(slug=VATEX_EVAL_CAMPAIGN_SLUG)
    aggregation_recompute(campaign=campaign)  # the quality app's rule: review at range >= 3
    release = build(campaigns=[campaign], seed=0)

    # Independently, from the shipped file: no QC exclusion, so every candidate has its three
    # ratings; those whose ratings span the review threshold wait for an expert and stay out.
    raw = json.loads(VATEX_EVAL_PATH.read_text())
    spans = [
        max(row) - min(row) for entry in raw.values() for row in ast.literal_eval(entry["scores"])
    ]
    expected = sum(1 for span in spans if span < campaign.review_range_threshold)
    assert len(spans) == 18_000
    assert expected == 16_847
    assert release.counts["released"] == expected
    assert release.counts["excluded"]["under_review"] == 18_000 - expected
    assert release.counts["excluded"]["below_quota"] == 0

    root = release_root(release)
    cache = tmp_path / "hf-cache"
    as_json = datasets.load_dataset(
        "json",
        data_files={split: str(root / f"data/{split}.jsonl") for split in ("train", "validation")},
        cache_dir=str(cache),
    )
    as_parquet = datasets.load_dataset(
        "parquet",
        data_files={
            split: str(root / f"parquet/{split}.parquet") for split in ("train", "validation")
        },
        cache_dir=str(cache),
    )
    for split in ("train", "validation"):
        rows = release.counts["splits"][split]["candidates"]
        assert as_json[split].num_rows == rows == as_parquet[split].num_rows
        assert as_json[split].features == as_parquet[split].features
    assert as_json["train"].num_rows + as_json["validation"].num_rows == expected
    assert 0.75 < as_json["train"].num_rows / expected < 0.85
    train_clips = set(as_json["train"]["clip_id"])
    assert train_clips.isdisjoint(as_json["validation"]["clip_id"])

    record = jsonl_records(release, "train")[0]
    entry = raw[record["clip_id"]]
    index = int(record["candidate_id"].rsplit(":", 1)[1])
    ratings = ast.literal_eval(entry["scores"])[index]
    assert record["text"] == entry["cands"][index].strip()
    assert record["references"] == [text.strip() for text in entry["refs"][0]]
    stored = CampaignCandidate.objects.get(
        campaign=campaign, candidate__external_id=record["candidate_id"]
    )
    assert record["overall"] == stored.overall == pytest.approx(sum(ratings) / 3, abs=1e-8)
    assert record["scores"] == stored.means
    assert record["scores"]["overall"] == pytest.approx(sum(ratings) / 3, abs=1e-12)
    assert record["normalized"] == (record["overall"] - 1) / 4
    assert record["judgments"] == 3

    assert release.stats["annotators"] == 3 == release.stats["imported_rater_slots"]
    assert release.stats["references"] == 9 * release.stats["clips"]
    assert "NOTICE.md" in release.files
    assert read_file(release, "NOTICE.md") == (REPO_ROOT / "data/vatex_eval/NOTICE.md").read_bytes()
    card = read_file(release, "README.md").decode()
    assert "EMScore" in card and "MIT licence" in card and "CC BY 4.0" in card
    # Each source's own licence; the imported campaign collected nothing under the curator's.
    assert card.startswith("---\nlicense:\n- cc-by-4.0\n- mit\n")
    assert "| VATEX-EVAL candidate captions and human judgments | MIT (`mit`) | Shi et al." in card
    assert "judgments collected with Lepus" not in card
    # The card's YAML makes the release folder itself loadable.
    from_folder = datasets.load_dataset(str(root), cache_dir=str(cache))
    assert (
        from_folder["validation"].num_rows == release.counts["splits"]["validation"]["candidates"]
    )
