"""A release of the shipped VATEX-EVAL judgments, imported with the real importer, read back with
Hugging Face `datasets` (JSON and Parquet)."""

from __future__ import annotations

import ast
import json

import datasets
import pytest
from django.db import connection

from annotation.models import Campaign
from datasets_app.services.imports.vatex import VATEX_EVAL_CAMPAIGN_SLUG, vatex_eval_import
from tests.export.helpers import build, jsonl_records, read_file, release_root
from tests.support.processes import REPO_ROOT

VATEX_EVAL_PATH = REPO_ROOT / "data" / "vatex_eval" / "vid_cans_score_dict.json"


def aggregate(campaign: Campaign) -> None:
    """The quality app's aggregation (mean of the kept ratings, review when the kept ratings span
    the campaign's threshold or more). Until `annotation.services.aggregation` is merged, the
    same rule in one SQL statement."""
    try:
        from annotation.services.aggregation import aggregation_recompute
    except ImportError:
        aggregation_recompute = None
    if aggregation_recompute is not None:
        aggregation_recompute(campaign=campaign)
        return
    with connection.cursor() as cursor:
        cursor.execute(
            """
            UPDATE annotation_campaigncandidate cc SET
              judgments_total = a.n, kept_judgments = a.n,
              means = jsonb_build_object('overall', a.mean), overall = a.mean,
              normalized = (a.mean - 1) / 4, training_class = floor(a.mean + 0.5),
              rating_range = a.spread,
              review_state = CASE WHEN a.spread >= %(threshold)s THEN 'open' ELSE '' END,
              is_finalised = a.n >= cc.quota
            FROM (SELECT campaign_candidate_id AS id, count(*) AS n,
                         avg((values->>'overall')::float8) AS mean,
                         max((values->>'overall')::float8) - min((values->>'overall')::float8)
                           AS spread
                  FROM annotation_judgment WHERE campaign_id = %(campaign)s AND NOT is_excluded
                  GROUP BY 1) a
            WHERE cc.id = a.id
            """,
            {"campaign": campaign.pk, "threshold": campaign.review_range_threshold},
        )


@pytest.mark.slow
def test_a_release_of_the_vatex_eval_import_loads_with_datasets(db, tmp_path):
    vatex_eval_import(path=VATEX_EVAL_PATH)
    campaign = Campaign.objects.get(slug=VATEX_EVAL_CAMPAIGN_SLUG)
    aggregate(campaign)
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
    assert record["overall"] == pytest.approx(sum(ratings) / 3, abs=1e-12)
    assert record["scores"] == {"overall": record["overall"]}
    assert record["normalized"] == (record["overall"] - 1) / 4
    assert record["judgments"] == 3

    assert release.stats["annotators"] == 3 == release.stats["imported_rater_slots"]
    assert release.stats["references"] == 9 * release.stats["clips"]
    assert "NOTICE.md" in release.files
    assert read_file(release, "NOTICE.md") == (REPO_ROOT / "data/vatex_eval/NOTICE.md").read_bytes()
    card = read_file(release, "README.md").decode()
    assert "EMScore" in card and "MIT licence" in card and "CC BY 4.0" in card
    # The card's YAML makes the release folder itself loadable.
    from_folder = datasets.load_dataset(str(root), cache_dir=str(cache))
    assert (
        from_folder["validation"].num_rows == release.counts["splits"]["validation"]["candidates"]
    )
