"""The embedding-based plug-ins of issue 30 (PAC-S, FactVC, Polos, Redemption Score): each formula
checked against a hand computation in NumPy/SciPy on embeddings taken from tiny random checkpoints'
public transformers API, the fusion and its grid search on planted data, and the registry's
"unavailable, with the reason" rows."""

from __future__ import annotations

import hashlib
import json
import sys
from pathlib import Path

import numpy as np
import pytest
from scipy import stats

from tests.metrics.tiny_clip import Reference, save_tiny_clip
from tests.metrics.tiny_encoders import save_tiny_bert, save_tiny_vit
from training_bridge.metrics.plugins import (
    METRIC_NAMES,
    MetricItem,
    Video,
    available_metrics,
    parse_settings,
)
from training_bridge.metrics.redemption import (
    ImageEncoder,
    RedemptionScore,
    TextEncoder,
    fit_fusion,
    fuse,
    gaussian_pmi,
    squash,
    weight_grid,
)
from training_bridge.metrics.standard import MetricUnavailable

pytest.importorskip("transformers")

CAPTIONS = [
    ("a man plays a guitar on a stage", ("a man is playing a guitar", "someone plays music")),
    ("a dog runs", ("a dog is running in a park",)),
    ("two people dance in a kitchen", ("people dance", "a couple dances at home")),
    ("a woman cooks food", ("a woman is cooking", "someone prepares dinner")),
    ("a cat sleeps on a red sofa", ("a cat is sleeping",)),
    ("children play football outside", ("kids play soccer on a field", "a ball game")),
]
SHAPES = [(3, 40, 48, 3), (1, 32, 32, 3), (2, 36, 60, 3)]  # a one-frame "video" is an image


@pytest.fixture(scope="module")
def checkpoints(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("embedding")
    return {
        "clip": save_tiny_clip(root / "clip", seed=3),
        "bert": save_tiny_bert(root / "bert", seed=5),
        "vit": save_tiny_vit(root / "vit", seed=6),
    }


@pytest.fixture(scope="module")
def items() -> list[MetricItem]:
    rng = np.random.default_rng(11)
    frames = {
        f"clip-{i}": rng.integers(0, 256, shape, dtype=np.uint8) for i, shape in enumerate(SHAPES)
    }
    keys = list(frames)
    return [
        MetricItem(text, refs, Video.of(keys[i % 3], frames[keys[i % 3]]))
        for i, (text, refs) in enumerate(CAPTIONS)
    ]


def unit(vector: np.ndarray) -> np.ndarray:
    return vector / np.linalg.norm(vector, axis=-1, keepdims=True)


def hand_video(reference: Reference, frames: np.ndarray) -> np.ndarray:
    return unit(unit(reference.frames(frames)).mean(axis=0))


# --- PAC-S -------------------------------------------------------------------------------------


def test_pac_s_and_ref_pac_s_equal_the_hand_computation(checkpoints, items) -> None:  # type: ignore[no-untyped-def]
    reference = Reference(checkpoints["clip"])
    metrics, unavailable = available_metrics(
        {"pacs_model": str(checkpoints["clip"])}, ["pacs", "refpacs"]
    )
    assert unavailable == {}
    pacs = metrics["pacs"].score(items)
    refpacs = metrics["refpacs"].score(items)
    for index, item in enumerate(items):
        assert item.video is not None
        caption = unit(reference.caption("A photo depicts " + item.candidate))
        video = hand_video(reference, item.video.load())
        expected = 2.0 * max(float(caption @ video), 0.0)  # w = 2 (pac_score.py, w=2.0)
        assert pacs[index] == pytest.approx(expected, abs=1e-5)
        text = max(
            float(caption @ unit(reference.caption("A photo depicts " + ref)))
            for ref in item.references
        )
        harmonic = 2 * expected * text / (expected + text)
        assert refpacs[index] == pytest.approx(harmonic, abs=1e-5)
    assert metrics["pacs"].label == "PAC-S"


def test_pac_s_plus_reads_its_own_checkpoint(checkpoints, items, tmp_path) -> None:  # type: ignore[no-untyped-def]
    plus = save_tiny_clip(tmp_path / "plus", seed=9)
    metrics, _ = available_metrics(
        {"pacs_model": str(checkpoints["clip"]), "pacs_plus_model": str(plus)},
        ["pacs", "pacs_plus"],
    )
    first, second = metrics["pacs"].score(items), metrics["pacs_plus"].score(items)
    assert first != second
    reference = Reference(plus)
    item = items[0]
    assert item.video is not None
    caption = unit(reference.caption("A photo depicts " + item.candidate))
    expected = 2.0 * max(float(caption @ hand_video(reference, item.video.load())), 0.0)
    assert second[0] == pytest.approx(expected, abs=1e-5)


# --- FactVC ------------------------------------------------------------------------------------


def test_factvc_is_the_precision_side_of_emscore(checkpoints, items) -> None:  # type: ignore[no-untyped-def]
    reference = Reference(checkpoints["clip"])
    metrics, _ = available_metrics(
        {"factvc_model": str(checkpoints["clip"]), "emscore_idf": "false"},
        ["factvc", "factvc_ref"],
    )
    plain, with_refs = metrics["factvc"].score(items), metrics["factvc_ref"].score(items)
    for index, item in enumerate(items):
        assert item.video is not None
        tokens = unit(reference.tokens(item.candidate))
        frames = unit(reference.frames(item.video.load()))
        coarse = float(unit(reference.caption(item.candidate)) @ unit(frames.mean(axis=0)))
        precision = float((tokens @ frames.T).max(axis=1).mean())
        video_side = (coarse + precision) / 2
        assert plain[index] == pytest.approx(video_side, abs=1e-5)
        best_coarse = max(
            float(unit(reference.caption(item.candidate)) @ unit(reference.caption(ref)))
            for ref in item.references
        )
        best_precision = max(
            float((tokens @ unit(reference.tokens(ref)).T).max(axis=1).mean())
            for ref in item.references
        )
        expected = (video_side + (best_coarse + best_precision) / 2) / 2
        assert with_refs[index] == pytest.approx(expected, abs=1e-5)


# --- Redemption Score: formulas ---------------------------------------------------------------


def test_mid_pmi_equals_the_gaussian_log_density_ratio() -> None:
    rng = np.random.default_rng(2)
    x = rng.normal(size=(40, 3))
    y = 0.6 * x[:, :2] + rng.normal(scale=0.5, size=(40, 2))
    eps = 1e-3
    pmi = gaussian_pmi(x, y, eps=eps)

    def fitted(block: np.ndarray) -> stats._multivariate.multivariate_normal_frozen:
        covariance = np.cov(block, rowvar=False) + eps * np.eye(block.shape[1])
        return stats.multivariate_normal(block.mean(axis=0), covariance)

    z = np.concatenate([x, y], axis=1)
    expected = fitted(z).logpdf(z) - fitted(x).logpdf(x) - fitted(y).logpdf(y)
    np.testing.assert_allclose(pmi, expected, rtol=1e-9, atol=1e-9)

    # The same written out: I(X; Y) + (D2(x) + D2(y) - D2(z)) / 2 with explicit inverses.
    def covariance(block: np.ndarray) -> np.ndarray:
        centered = block - block.mean(axis=0)
        return centered.T @ centered / (len(block) - 1) + eps * np.eye(block.shape[1])

    def mahalanobis(block: np.ndarray) -> np.ndarray:
        centered = block - block.mean(axis=0)
        inverse = np.linalg.inv(covariance(block))
        return np.array([row @ inverse @ row for row in centered])

    determinant = np.linalg.det
    information = 0.5 * np.log(
        determinant(covariance(x)) * determinant(covariance(y)) / determinant(covariance(z))
    )
    direct = information + (mahalanobis(x) + mahalanobis(y) - mahalanobis(z)) / 2
    np.testing.assert_allclose(pmi, direct, rtol=1e-9, atol=1e-9)

    # Unregularised, the mean PMI of the fitted set is its mutual information I(X; Y) (Eq. 1):
    # the squared Mahalanobis terms average to (dx + dy - dz)(N - 1)/N = 0.
    def log_det(block: np.ndarray) -> float:
        return float(np.linalg.slogdet(np.cov(block, rowvar=False))[1])

    information = (log_det(x) + log_det(y) - log_det(z)) / 2
    assert gaussian_pmi(x, y, eps=0).mean() == pytest.approx(information, abs=1e-9)


def test_normalisation_and_fusion_follow_eq_7_and_8() -> None:
    assert squash([0.0, 1.0, -3.0]).tolist() == [0.5, 0.75, 0.125]
    z = np.array([[0.2, 0.5, 0.9], [0.7, 0.1, 0.4]])
    alpha, beta, gamma, interpolation = 0.2, 0.3, 0.5, 0.8
    fused = fuse(z, alpha, beta, gamma, interpolation)
    for row, value in zip(z, fused, strict=True):
        linear = alpha * row[0] + beta * row[1] + gamma * row[2]
        geometric = row[0] ** alpha * row[1] ** beta * row[2] ** gamma
        assert value == pytest.approx(interpolation * linear + (1 - interpolation) * geometric)


def test_the_weight_grid_respects_the_constraints() -> None:
    grid = weight_grid()
    # a + b + c = 20 steps of 0.05, each >= 3 steps: C(13, 2) = 78 points.
    assert len(grid) == 78
    assert all(sum(point) == pytest.approx(1.0) and min(point) >= 0.15 - 1e-12 for point in grid)
    assert (0.15, 0.3, 0.55) in grid and (0.7, 0.15, 0.15) in grid
    assert len(weight_grid(0.1, 0.15)) == 15  # 10 steps of 0.1, each >= 2 steps: C(6, 2)


def test_the_grid_search_finds_a_planted_optimum() -> None:
    rng = np.random.default_rng(4)
    signals = rng.uniform(0.05, 0.95, size=(400, 3))
    planted = (0.25, 0.15, 0.6, 0.3)
    human = fuse(signals, *planted)
    fit = fit_fusion(signals, human)
    assert (fit.alpha, fit.beta, fit.gamma, fit.interpolation) == pytest.approx(planted)
    assert fit.kendall == pytest.approx(1.0)
    assert fit.tried == 78 * 11
    # Human scores that favour one signal outside the allowed corner still get a feasible fit.
    only_dino = fit_fusion(signals, signals[:, 1])
    assert only_dino.beta == pytest.approx(0.7) and min(only_dino.alpha, only_dino.gamma) >= 0.15


def stand_in_generator(caption: str, count: int) -> list[np.ndarray]:
    """Draws `count` images from the caption's hash: generation g is seeded with g."""
    digest = int.from_bytes(hashlib.sha256(caption.encode()).digest()[:4], "little")
    return [
        np.random.default_rng([digest, seed]).integers(0, 256, (32, 40, 3), dtype=np.uint8)
        for seed in range(count)
    ]


def test_redemption_score_equals_the_hand_computation(checkpoints, items) -> None:  # type: ignore[no-untyped-def]
    import torch
    from transformers import AutoTokenizer, BertModel, ViTImageProcessor, ViTModel

    from training_bridge.metrics.clip import ClipEncoder

    metric = RedemptionScore(
        clip=ClipEncoder(str(checkpoints["clip"])),
        dino=ImageEncoder(str(checkpoints["vit"])),
        gte=TextEncoder(str(checkpoints["bert"])),
        generator=stand_in_generator,
        weights=(0.15, 0.3, 0.55, 0.8),
        generations=2,
        mid_eps=1e-2,
    )
    signals = metric.signals(items)
    scores = metric.score(items)

    clip = Reference(checkpoints["clip"])
    vit = ViTModel.from_pretrained(checkpoints["vit"], add_pooling_layer=False).eval()
    processor = ViTImageProcessor.from_pretrained(checkpoints["vit"])
    bert = BertModel.from_pretrained(checkpoints["bert"]).eval()
    tokenizer = AutoTokenizer.from_pretrained(checkpoints["bert"])

    def dino(images: list[np.ndarray]) -> np.ndarray:
        pixels = processor(images=images, return_tensors="pt", input_data_format="channels_last")
        with torch.no_grad():
            return unit(vit(**pixels).last_hidden_state[:, 0].double().numpy())

    def gte(text: str) -> np.ndarray:
        with torch.no_grad():
            hidden = bert(**tokenizer([text], return_tensors="pt")).last_hidden_state[0]
        return unit(hidden.double().numpy().mean(axis=0))  # one text: no padding to mask

    videos = [item.video.load() for item in items if item.video is not None]
    images = np.stack([hand_video(clip, frames) for frames in videos])
    texts = np.stack([unit(clip.caption(item.candidate)) for item in items])
    eps = 1e-2
    z = np.concatenate([images, texts], axis=1)

    def log_density(block: np.ndarray) -> np.ndarray:
        covariance = np.cov(block, rowvar=False) + eps * np.eye(block.shape[1])
        return stats.multivariate_normal(block.mean(axis=0), covariance).logpdf(block)

    mid = log_density(z) - log_density(images) - log_density(texts)
    expected_dino, expected_gte = [], []
    for item, frames in zip(items, videos, strict=True):
        source = unit(unit(dino(list(frames))).mean(axis=0))
        candidate = dino(stand_in_generator(item.candidate, 2))
        reference = dino(stand_in_generator(item.references[0], 2))
        per_generation = [
            (candidate[g] @ source + candidate[g] @ reference[g]) / 2 for g in range(2)
        ]
        expected_dino.append(np.mean(per_generation))
        expected_gte.append(max(gte(item.candidate) @ gte(ref) for ref in item.references))
    np.testing.assert_allclose(signals[:, 0], mid, rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(signals[:, 1], expected_dino, atol=1e-5)
    np.testing.assert_allclose(signals[:, 2], expected_gte, atol=1e-5)
    normalised = np.stack([mid, expected_dino, expected_gte], axis=1)
    normalised = (normalised / (1 + np.abs(normalised)) + 1) / 2
    linear = normalised @ np.array([0.15, 0.3, 0.55])
    geometric = np.prod(normalised ** np.array([0.15, 0.3, 0.55]), axis=1)
    np.testing.assert_allclose(scores, 0.8 * linear + 0.2 * geometric, atol=1e-5)
    # MID's Gaussians come from the scored set: one candidate alone is reported, not crashed on.
    with pytest.raises(MetricUnavailable, match="MID on 1 candidates: MID needs at least two"):
        metric.score(items[:1])


# --- Polos -------------------------------------------------------------------------------------


def test_polos_equals_the_hand_computation(checkpoints, items, tmp_path) -> None:  # type: ignore[no-untyped-def]
    import torch
    from transformers import AutoTokenizer, BertModel

    layers = 3  # embeddings + 2 transformer layers of the tiny BERT
    width = 24 * 4 + 16 * 6  # SimCSE width x4 + CLIP projection x6
    torch.manual_seed(0)
    head = torch.nn.Sequential(
        torch.nn.Linear(width, 20),
        torch.nn.Tanh(),
        torch.nn.Linear(20, 12),
        torch.nn.Tanh(),
        torch.nn.Linear(12, 1),
        torch.nn.Sigmoid(),
    ).double()
    scalars = torch.tensor([0.3, -0.2, 0.8], dtype=torch.float64)
    state = {f"scalar_mix.scalar_parameters.{k}": scalars[k : k + 1] for k in range(layers)}
    state["scalar_mix.gamma"] = torch.tensor([1.3])
    linears = [module for module in head if isinstance(module, torch.nn.Linear)]
    for index, module in enumerate(linears, start=1):
        state[f"ff.0.ff.linear_{index}.weight"] = module.weight.detach().float()
        state[f"ff.0.ff.linear_{index}.bias"] = module.bias.detach().float()
    state["encoder.model.unused"] = torch.zeros(1)  # other keys of the authors' checkpoint
    directory = tmp_path / "polos"
    directory.mkdir()
    torch.save({"state_dict": state}, directory / "head.pt")
    (directory / "polos.json").write_text(
        json.dumps({"text_model": str(checkpoints["bert"]), "clip_model": str(checkpoints["clip"])})
    )
    metrics, unavailable = available_metrics({"polos_model": str(directory)}, ["polos"])
    assert unavailable == {}
    scores = metrics["polos"].score(items)

    clip = Reference(checkpoints["clip"])
    bert = BertModel.from_pretrained(checkpoints["bert"]).eval()
    tokenizer = AutoTokenizer.from_pretrained(checkpoints["bert"])

    def simcse(text: str) -> np.ndarray:
        with torch.no_grad():
            hidden = bert(**tokenizer([text], return_tensors="pt"), output_hidden_states=True)
        mixed = np.zeros(1)
        weights = torch.softmax(scalars, dim=0).numpy()
        for weight, layer in zip(weights, hidden.hidden_states, strict=True):
            values = layer[0].double().numpy()
            mixed = mixed + weight * (values - values.mean()) / np.sqrt(values.var() + 1e-12)
        return 1.3 * mixed[0]

    for index, item in enumerate(items):
        assert item.video is not None
        v = clip.frames(item.video.load()).mean(axis=0)
        c_s, c_v = simcse(item.candidate), clip.caption("A photo depicts " + item.candidate)
        per_reference = []
        for ref in item.references:
            r_s, r_v = simcse(ref), clip.caption("A photo depicts " + ref)
            x = np.concatenate(
                [
                    r_s,
                    c_s,
                    abs(c_s - r_s),
                    c_s * r_s,
                    v,
                    c_v,
                    abs(v - c_v),
                    v * c_v,
                    abs(r_v - c_v),
                    r_v * c_v,
                ]
            )
            with torch.no_grad():
                per_reference.append(float(head(torch.from_numpy(x)[None].double())[0, 0]))
        # float32 weights in head.pt against the float64 head here
        assert scores[index] == pytest.approx(max(per_reference), abs=1e-5)


# --- registry ----------------------------------------------------------------------------------


def test_every_new_metric_is_listed_with_its_reason(tmp_path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    for variable in ("LEPUS_PACS_MODEL", "LEPUS_CLIP_MODEL", "LEPUS_DINO_MODEL", "LEPUS_T2I_MODEL"):
        monkeypatch.delenv(variable, raising=False)
    names = [
        "pacs",
        "refpacs",
        "pacs_plus",
        "refpacs_plus",
        "factvc",
        "factvc_ref",
        "polos",
        "redemption",
    ]
    assert set(names) <= set(METRIC_NAMES)
    available, unavailable = available_metrics({"polos_model": str(tmp_path)}, names)
    assert available == {} and list(unavailable) == names
    assert unavailable["pacs"].startswith("no weights given: set pacs_model=")
    assert unavailable["refpacs_plus"].startswith("no weights given: set pacs_plus_model=")
    assert unavailable["factvc"].startswith("no weights given: set factvc_model=")
    assert unavailable["polos"] == f"polos_model={tmp_path}: no polos.json there"
    redemption = unavailable["redemption"]
    for setting in ("redemption_clip_model", "dino_model", "gte_model", "t2i_model"):
        assert setting in redemption


def test_redemption_without_diffusers_says_so(checkpoints, tmp_path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    pipeline = tmp_path / "sd3"
    pipeline.mkdir()
    (pipeline / "model_index.json").write_text("{}")
    settings = {
        "clip_model": str(checkpoints["clip"]),
        "dino_model": str(checkpoints["vit"]),
        "gte_model": str(checkpoints["bert"]),
        "t2i_model": str(pipeline),
    }
    # without the package (hidden here: it is a requirement), the reason names it
    monkeypatch.setitem(sys.modules, "diffusers", None)
    _, unavailable = available_metrics(settings, ["redemption"])
    assert unavailable == {
        "redemption": "t2i_model needs the diffusers package, which is not installed here"
    }


def test_new_settings_are_checked() -> None:
    with pytest.raises(ValueError, match=r"alpha \+ beta \+ gamma must be 1"):
        parse_settings({"redemption_weights": "0.2,0.2,0.2,0.5"})
    with pytest.raises(ValueError, match=r"at least 0\.15"):
        parse_settings({"redemption_weights": "0.1,0.3,0.6,0.5"})
    with pytest.raises(ValueError, match="mid_eps"):
        parse_settings({"mid_eps": "-1"})
    with pytest.raises(ValueError, match="redemption_generations"):
        parse_settings({"redemption_generations": "0"})
    parse_settings({"redemption_weights": "0.15,0.35,0.5,0.8", "mid_eps": "0"})
