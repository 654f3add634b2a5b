"""`training_bridge.metrics.fitting`: Redemption Score's fusion fitted on one set and evaluated on
another (tiny random encoders, a stand-in image generator), and a standard metric's affine
calibration, each against a direct NumPy/SciPy computation."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from scipy import stats

from tests.metrics.test_metrics_embedding_plugins import CAPTIONS, stand_in_generator
from tests.metrics.tiny_clip import save_tiny_clip
from tests.metrics.tiny_encoders import save_tiny_bert, save_tiny_vit
from training_bridge.metrics.benchmark import BenchmarkSet
from training_bridge.metrics.fitting import fit_and_evaluate
from training_bridge.metrics.plugins import StandardMetric, Video
from training_bridge.metrics.redemption import (
    ImageEncoder,
    RedemptionScore,
    TextEncoder,
    fit_fusion,
    fuse,
    squash,
)
from training_bridge.metrics.standard import standard_metric_scores

pytest.importorskip("transformers")

MORE = [
    ("a boy rides a bike down the street", ("a child rides a bicycle",)),
    ("a bird sits on a branch", ("a small bird on a tree", "a bird perches")),
    ("people sing in a choir", ("a choir sings a song",)),
    ("a man fixes a car engine", ("a mechanic repairs a car", "someone works on an engine")),
    ("a girl paints a picture", ("a child is painting",)),
    ("waves crash on a beach", ("the sea hits the shore",)),
]


def benchmark(
    rows: list[tuple[str, tuple[str, ...]]], human: np.ndarray, seed: int
) -> BenchmarkSet:
    rng = np.random.default_rng(seed)
    videos: list[Video | None] = [
        Video.of(f"{seed}-{index}", rng.integers(0, 256, (2, 32, 32, 3), dtype=np.uint8))
        for index in range(len(rows))
    ]
    return BenchmarkSet(
        candidates=[text for text, _ in rows],
        references=[list(refs) for _, refs in rows],
        human=np.asarray(human, dtype=np.float64),
        videos=videos,
    )


@pytest.fixture(scope="module")
def redemption(tmp_path_factory: pytest.TempPathFactory) -> RedemptionScore:
    from training_bridge.metrics.clip import ClipEncoder

    root: Path = tmp_path_factory.mktemp("fitting")
    return RedemptionScore(
        clip=ClipEncoder(str(save_tiny_clip(root / "clip", seed=2))),
        dino=ImageEncoder(str(save_tiny_vit(root / "vit", seed=3))),
        gte=TextEncoder(str(save_tiny_bert(root / "bert", seed=4))),
        generator=stand_in_generator,
        mid_eps=1e-2,
    )


def test_redemption_fusion_is_fitted_on_train_and_scored_on_test(redemption) -> None:  # type: ignore[no-untyped-def]
    placeholder = np.zeros(len(CAPTIONS))
    train = benchmark(CAPTIONS, placeholder, seed=1)
    test = benchmark(MORE, np.zeros(len(MORE)), seed=2)
    train_signals = squash(redemption.signals(train.items()))
    test_signals = squash(redemption.signals(test.items()))
    # Human scores planted from one point of the grid: the fit must reach tau = 1 on train.
    planted = (0.2, 0.15, 0.65, 0.5)
    train = benchmark(CAPTIONS, fuse(train_signals, *planted), seed=1)
    test_human = fuse(test_signals, *planted) + np.linspace(0, 0.01, len(MORE))
    test = benchmark(MORE, test_human, seed=2)

    fit = fit_and_evaluate(redemption, train, test)
    assert fit.fitted["kind"] == "fusion"
    assert fit.fitted["kendall_fit"] == pytest.approx(1.0)
    expected = fit_fusion(train_signals, train.human)
    weights = (expected.alpha, expected.beta, expected.gamma, expected.interpolation)
    assert [fit.fitted[k] for k in ("alpha", "beta", "gamma", "lambda")] == list(weights)
    fitted_test = fuse(test_signals, *weights)
    assert fit.result["test"]["kendall_b"] == pytest.approx(
        100 * stats.kendalltau(fitted_test, test_human).statistic, abs=1e-8
    )
    given = fuse(test_signals, *redemption.weights)
    assert fit.result["test_weights_given"]["spearman"] == pytest.approx(
        100 * stats.spearmanr(given, test_human).statistic, abs=1e-8
    )
    assert fit.result["candidates"] == {"train": 6, "test": 6}


def test_a_standard_metric_is_calibrated_onto_the_human_scale() -> None:
    train_human = np.array([1.0, 3.5, 2.0, 4.0, 2.5, 3.0])
    test_human = np.array([2.0, 1.5, 4.5, 3.0, 2.5, 1.0])
    train = benchmark(CAPTIONS, train_human, seed=1)
    test = benchmark(MORE, test_human, seed=2)
    fit = fit_and_evaluate(StandardMetric("bleu1"), train, test)

    def bleu(rows: list[tuple[str, tuple[str, ...]]]) -> np.ndarray:
        scores = standard_metric_scores(
            [text for text, _ in rows], [list(refs) for _, refs in rows], metrics=["bleu1"]
        )
        return np.asarray(scores["bleu1"], dtype=np.float64)

    train_scores, test_scores = bleu(CAPTIONS), bleu(MORE)
    design = np.stack([train_scores, np.ones_like(train_scores)], axis=1)
    (slope, intercept), *_ = np.linalg.lstsq(design, train_human, rcond=None)
    assert fit.fitted == pytest.approx({"kind": "affine", "slope": slope, "intercept": intercept})
    calibrated = slope * test_scores + intercept
    assert fit.result["test_error"]["rmse"] == pytest.approx(
        float(np.sqrt(np.mean((calibrated - test_human) ** 2)))
    )
    assert fit.result["test_error_uncalibrated"]["mae"] == pytest.approx(
        float(np.mean(np.abs(test_scores - test_human)))
    )
    sign = 1 if slope > 0 else -1
    assert fit.result["test"]["pearson"] == pytest.approx(
        100 * sign * stats.pearsonr(test_scores, test_human).statistic, abs=1e-8
    )
