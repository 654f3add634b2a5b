"""`manage.py fit_metric`: a metric fitted on a release's train split and evaluated on its test
split, stored with its parameters (`MetricEvaluation`); leakage between the splits refused with
nothing stored."""

from __future__ import annotations

import io
import json

import numpy as np
import pytest
from django.core.management import call_command
from django.core.management.base import CommandError
from django.db import IntegrityError

from annotation.models import CampaignCandidate
from export.models import Release, ReleaseRecord
from tests.metrics.vatex_eval_data import vatex_eval_subset
from tests.training_bridge.metric_benchmark_data import build_vatex_eval_campaign
from training_bridge.metrics.standard import standard_metric_scores
from training_bridge.models import MetricEvaluation

SUBSET = 60  # 10 clips


def run_command(*args: str) -> dict:  # type: ignore[type-arg]
    stdout = io.StringIO()
    call_command("fit_metric", *args, "--json", stdout=stdout, stderr=io.StringIO())
    return json.loads(stdout.getvalue())


@pytest.fixture
def release():  # type: ignore[no-untyped-def]
    data = vatex_eval_subset(SUBSET)
    campaign = build_vatex_eval_campaign(data)
    release = Release.objects.create(name="r", ratios=[0.5, 0.2, 0.3], status="succeeded")
    release.campaigns.add(campaign)
    items = list(
        CampaignCandidate.objects.filter(campaign=campaign)
        .select_related("candidate")
        .order_by("clip_id", "candidate__position")
    )
    clip_order = {c: i for i, c in enumerate(dict.fromkeys(item.clip_id for item in items))}
    overall = 1 + (np.arange(SUBSET) * 5 % 13) / 3
    ReleaseRecord.objects.bulk_create(
        [
            ReleaseRecord(
                release=release,
                campaign_candidate=item,
                candidate=item.candidate,
                clip_id=item.clip_id,
                split=(0, 2)[clip_order[item.clip_id] % 2],  # train and test alternate by clip
                overall=float(overall[index]),
                kept_judgments=3,
            )
            for index, item in enumerate(items)
        ]
    )
    return release, items, overall


@pytest.mark.django_db
def test_fit_on_train_evaluate_on_test_and_store(release) -> None:  # type: ignore[no-untyped-def]
    release, items, _ = release
    payload = run_command("--release", str(release.pk), "--metric", "bleu1")

    records = {r.campaign_candidate_id: r for r in ReleaseRecord.objects.filter(release=release)}
    rows = [(item, records[item.pk]) for item in items]

    def split(number: int) -> tuple[list[str], list[list[str]], np.ndarray]:
        chosen = [(item, record) for item, record in rows if record.split == number]
        texts = [item.candidate.text for item, _ in chosen]
        references = [
            list(item.clip.references.order_by("position").values_list("text", flat=True))
            for item, _ in chosen
        ]
        return texts, references, np.array([record.overall for _, record in chosen])

    train_texts, train_refs, train_human = split(0)
    scores = np.asarray(standard_metric_scores(train_texts, train_refs, metrics=["bleu1"])["bleu1"])
    slope, intercept = np.polyfit(scores, train_human, 1)
    stored = MetricEvaluation.objects.get(pk=payload["id"])
    assert stored.fitted == pytest.approx(
        {"kind": "affine", "slope": slope, "intercept": intercept}
    )
    assert payload["fitted"] == stored.fitted
    assert (stored.train_split, stored.test_split, stored.metric) == ("train", "test", "bleu1")
    assert stored.result["leakage"] == {"shared_clips": 0, "train_clips": 5, "test_clips": 5}
    assert stored.result["candidates"] == {"train": 30, "test": 30}
    test_texts, test_refs, test_human = split(2)
    test_scores = np.asarray(
        standard_metric_scores(test_texts, test_refs, metrics=["bleu1"])["bleu1"]
    )
    calibrated = slope * test_scores + intercept
    assert stored.result["test_error"]["rmse"] == pytest.approx(
        float(np.sqrt(np.mean((calibrated - test_human) ** 2)))
    )


@pytest.mark.django_db
def test_leakage_and_bad_requests_are_refused_and_nothing_is_stored(release) -> None:  # type: ignore[no-untyped-def]
    release, _, _ = release
    with pytest.raises(CommandError, match="same split"):
        run_command("--release", str(release.pk), "--metric", "bleu1", "--test-split", "train")
    with pytest.raises(CommandError, match="has no split holdout"):
        run_command("--release", str(release.pk), "--metric", "bleu1", "--test-split", "holdout")
    with pytest.raises(CommandError, match="polos cannot run here: no weights given"):
        run_command("--release", str(release.pk), "--metric", "polos")
    # One candidate of a test clip moved into train: that clip is in both splits.
    test_record = ReleaseRecord.objects.filter(release=release, split=2).first()
    assert test_record is not None
    ReleaseRecord.objects.filter(
        release=release, campaign_candidate_id=test_record.campaign_candidate_id
    ).update(split=0)
    with pytest.raises(CommandError, match="leakage: 1 of the 5 clips of the test split"):
        run_command("--release", str(release.pk), "--metric", "bleu1")
    assert not MetricEvaluation.objects.exists()


@pytest.mark.django_db
def test_the_database_refuses_one_split_for_both(release) -> None:  # type: ignore[no-untyped-def]
    release, _, _ = release
    with pytest.raises(IntegrityError):
        MetricEvaluation.objects.create(
            release=release, metric="bleu1", train_split="test", test_split="test"
        )


def test_evaluate_metrics_list_names_every_metric_and_why(tmp_path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    from tests.metrics.tiny_clip import save_tiny_clip
    from training_bridge.metrics.embedding_plugins import ENVIRONMENT
    from training_bridge.metrics.plugins import METRIC_NAMES

    for variable in ENVIRONMENT.values():
        monkeypatch.delenv(variable, raising=False)
    checkpoint = save_tiny_clip(tmp_path / "pacs")
    stdout = io.StringIO()
    call_command(
        "evaluate_metrics", "--list", "--json", "--set", f"pacs_model={checkpoint}", stdout=stdout
    )
    listing = json.loads(stdout.getvalue())["metrics"]
    assert set(listing) == set(METRIC_NAMES)  # --json sorts the keys
    assert listing["pacs"] == {
        "label": "PAC-S",
        "available": True,
        "unavailable": None,
        "in_table": True,
    }
    assert listing["refpacs"]["available"] is True
    assert listing["factvc"] == {
        "label": "FactVC",
        "available": False,
        "unavailable": "no weights given: set factvc_model=PATH or a model id in the local "
        "Hugging Face cache",
        "in_table": True,
    }
    assert listing["redemption"]["available"] is False
    assert "t2i_model" in listing["redemption"]["unavailable"]
