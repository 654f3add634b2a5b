"""`manage.py evaluate_metrics --release ID`: the standard metrics against the scores a release
carries (`export.ReleaseRecord.overall`), per split, per campaign, with the EMScore protocol.

Skipped where the export app has no release records yet (the releases work lands separately)."""

from __future__ import annotations

import io
import json

import numpy as np
import pytest
from django.apps import apps
from django.core.management import call_command
from django.core.management.base import CommandError
from scipy import stats

from annotation.models import CampaignCandidate
from tests.metrics.vatex_eval_data import vatex_eval_subset
from tests.training_bridge.metric_benchmark_data import (
    VATEX_EVAL_SLUG,
    build_crowd_campaign,
    build_vatex_eval_campaign,
)
from training_bridge.metrics.standard import tokenize_corpus

try:
    Release = apps.get_model("export", "Release")
    ReleaseRecord = apps.get_model("export", "ReleaseRecord")
except LookupError:
    pytest.skip("export.ReleaseRecord is not installed on this branch yet", allow_module_level=True)

pytest.importorskip("pycocoevalcap")
from pycocoevalcap.cider.cider import Cider

SUBSET = 120  # 20 clips


def run_command(*args: str) -> dict:  # type: ignore[type-arg]
    stdout = io.StringIO()
    call_command("evaluate_metrics", *args, "--json", stdout=stdout, stderr=io.StringIO())
    return json.loads(stdout.getvalue())


def cider(candidates: list[str], references: list[list[str]]) -> np.ndarray:
    tokenized, tokenized_references = tokenize_corpus(candidates, references)
    _, scores = Cider().compute_score(
        dict(enumerate(tokenized_references)),
        {index: [text] for index, text in enumerate(tokenized)},
    )
    return np.array(scores)


@pytest.fixture
def release_setup():  # type: ignore[no-untyped-def]
    data = vatex_eval_subset(SUBSET)
    campaign = build_vatex_eval_campaign(data)
    release = Release.objects.create(name="r1", ratios=[0.5, 0.5], status="succeeded")
    release.campaigns.add(campaign)
    items = list(
        CampaignCandidate.objects.filter(campaign=campaign)
        .select_related("candidate")
        .order_by("clip_id", "candidate__position")
    )
    # The release's own scores differ from the raters' mean, so the test sees which one is used;
    # clips alternate between the two splits.
    overall = 1 + (np.arange(SUBSET) * 7 % 17) / 4
    clip_order = {
        clip_id: index for index, clip_id in enumerate(dict.fromkeys(i.clip_id for i in items))
    }
    splits = np.array([clip_order[item.clip_id] % 2 for item in items])
    ReleaseRecord.objects.bulk_create(
        [
            ReleaseRecord(
                release=release,
                campaign_candidate=item,
                candidate=item.candidate,
                clip_id=item.clip_id,
                split=int(splits[index]),
                overall=float(overall[index]),
                kept_judgments=3,
            )
            for index, item in enumerate(items)
        ]
    )
    return data, release, overall, splits


@pytest.mark.django_db
def test_release_uses_its_own_scores_and_splits(release_setup) -> None:  # type: ignore[no-untyped-def]
    data, release, overall, splits = release_setup
    table = run_command("--release", str(release.pk), "--metrics", "cider")
    expected = cider(data.candidates, data.references)
    assert table["cider"]["kendall_b"] == pytest.approx(
        100 * stats.kendalltau(expected, overall).statistic, abs=1e-6
    )

    validation = run_command(
        "--release", str(release.pk), "--split", "validation", "--metrics", "cider"
    )
    keep = splits == 1
    # CIDEr's IDF comes from the scored set, so the validation split is scored on its own.
    expected = cider(
        [t for t, k in zip(data.candidates, keep, strict=True) if k],
        [r for r, k in zip(data.references, keep, strict=True) if k],
    )
    assert validation["cider"]["spearman"] == pytest.approx(
        100 * stats.spearmanr(expected, overall[keep]).statistic, abs=1e-6
    )


@pytest.mark.django_db
def test_release_with_emscore_protocol_uses_the_rater_slots(release_setup) -> None:  # type: ignore[no-untyped-def]
    data, release, _, _ = release_setup
    table = run_command(
        "--release", str(release.pk), "--protocol", "emscore", "--refs", "1", "--metrics", "cider"
    )
    expected = np.around(cider(data.candidates, [group[:1] for group in data.references]), 4)
    tau = np.mean([stats.kendalltau(expected, data.rater_scores[:, j]).statistic for j in range(3)])
    assert table["cider"]["kendall_b"] == pytest.approx(100 * round(tau, 4), abs=1e-9)


@pytest.mark.django_db
def test_release_restricted_to_a_campaign_and_errors(release_setup) -> None:  # type: ignore[no-untyped-def]
    _, release, _, _ = release_setup
    build_crowd_campaign(
        slug="crowd-c",
        clips=[(["a cat sleeps"], [("a cat", [{"relevance": 3}]), ("a dog", [{"relevance": 2}])])],
    )
    with pytest.raises(CommandError, match="no candidates with human scores"):
        run_command("--release", str(release.pk), "--campaign", "crowd-c")
    assert "cider" in run_command(
        "--release", str(release.pk), "--campaign", VATEX_EVAL_SLUG, "--metrics", "cider"
    )
    with pytest.raises(CommandError, match="has no split test"):
        run_command("--release", str(release.pk), "--split", "test")
    with pytest.raises(CommandError, match="release 999999 does not exist"):
        run_command("--release", "999999")
    queued = Release.objects.create(name="r2", ratios=[0.8, 0.2])
    with pytest.raises(CommandError, match="has not succeeded"):
        run_command("--release", str(queued.pk))
