"""The metric plug-ins (`training_bridge.metrics.plugins` and `.clip`): each learned formula checked
against a hand computation in NumPy on embeddings taken from the checkpoint's public transformers
API (a tiny random CLIP saved to disk), the standard metrics through the same interface, and the
"unavailable, with the reason" paths."""

from __future__ import annotations

import math
from collections import Counter
from pathlib import Path

import numpy as np
import pytest

from tests.metrics.tiny_clip import Reference, save_tiny_clip
from training_bridge.metrics.embedding_plugins import ENVIRONMENT
from training_bridge.metrics.plugins import (
    METRIC_NAMES,
    TABLE_METRICS,
    CaptionMetric,
    MetricItem,
    Video,
    available_metrics,
    parse_settings,
    score_metrics,
)
from training_bridge.metrics.standard import standard_metric_scores

pytest.importorskip("transformers")

CAPTIONS = [
    ("a man plays a guitar on a stage", ("a man is playing a guitar", "someone plays music")),
    ("a dog runs", ("a dog is running in a park",)),
    ("two people dance in a kitchen", ("people dance", "a couple dances at home", "dancing")),
    ("a woman cooks food", ("a woman is cooking", "someone prepares dinner")),
    ("a cat sleeps on a red sofa!", ("a cat is sleeping",)),
    ("children play football outside", ("kids play soccer on a field", "a ball game")),
    ("a car drives fast", ("a red car drives on a road",)),
    ("someone talks", ("a man talks to the camera", "a person speaks")),
]
SHAPES = [(3, 40, 48, 3), (5, 32, 32, 3), (2, 36, 60, 3)]


@pytest.fixture(scope="module")
def checkpoints(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("clip")
    return {
        "clip": save_tiny_clip(root / "clip", seed=1),
        "lclip": save_tiny_clip(root / "lclip", seed=4),
    }


@pytest.fixture(scope="module")
def frames() -> dict[str, np.ndarray]:
    rng = np.random.default_rng(7)
    return {
        f"clip-{index}": rng.integers(0, 256, shape, dtype=np.uint8)
        for index, shape in enumerate(SHAPES)
    }


@pytest.fixture(scope="module")
def items(frames: dict[str, np.ndarray]) -> list[MetricItem]:
    keys = list(frames)
    return [
        MetricItem(text, references, Video.of(keys[index % len(keys)], frames[keys[index % 3]]))
        for index, (text, references) in enumerate(CAPTIONS)
    ]


@pytest.fixture(scope="module")
def reference(checkpoints: dict[str, Path]) -> Reference:
    return Reference(checkpoints["clip"])


def unit(vector: np.ndarray) -> np.ndarray:
    return vector / np.linalg.norm(vector, axis=-1, keepdims=True)


def hand_video(reference: Reference, frames: np.ndarray) -> np.ndarray:
    """The mean over frames of the L2-normalised frame embeddings."""
    return unit(reference.frames(frames)).mean(axis=0)


def hand_clip_s(reference: Reference, item: MetricItem, prompt: str) -> float:
    assert item.video is not None
    caption = reference.caption(f"{prompt} {item.candidate}")
    video = hand_video(reference, item.video.load())
    cosine = float(unit(caption) @ unit(video))
    return 2.5 * max(cosine, 0.0)


def hand_ref_clip_s(reference: Reference, item: MetricItem, prompt: str) -> float:
    clip_score = hand_clip_s(reference, item, prompt)
    caption = unit(reference.caption(f"{prompt} {item.candidate}"))
    text_side = max(
        max(float(caption @ unit(reference.caption(f"{prompt} {ref}"))) for ref in item.references),
        0.0,
    )
    if clip_score + text_side == 0:
        return 0.0
    return 2 * clip_score * text_side / (clip_score + text_side)


def scores_of(names: list[str], settings: dict[str, str], items: list[MetricItem]) -> dict:  # type: ignore[type-arg]
    metrics, unavailable = available_metrics(settings, names)
    assert unavailable == {}
    scores, failed = score_metrics(metrics, items)
    assert failed == {}
    return scores


def test_clip_s_and_ref_clip_s_equal_the_hand_computation(checkpoints, items, reference) -> None:  # type: ignore[no-untyped-def]
    scores = scores_of(
        ["clipscore", "refclipscore"], {"clip_model": str(checkpoints["clip"])}, items
    )
    expected = [hand_clip_s(reference, item, "A photo depicts") for item in items]
    assert scores["clipscore"] == pytest.approx(expected, abs=1e-5)
    # The random CLIP gives both signs: the max(., 0) clipping is exercised on both sides.
    assert any(value > 0.05 for value in expected) and any(value == 0 for value in expected)
    expected_ref = [hand_ref_clip_s(reference, item, "A photo depicts") for item in items]
    assert scores["refclipscore"] == pytest.approx(expected_ref, abs=1e-5)
    assert any(value > 0.01 for value in expected_ref)


def test_clip_prompt_setting_changes_the_text_side(checkpoints, items, reference) -> None:  # type: ignore[no-untyped-def]
    settings = {"clip_model": str(checkpoints["clip"]), "clip_prompt": ""}
    scores = scores_of(["clipscore"], settings, items)
    # Without a prompt the caption is encoded bare.
    bare = []
    for item in items:
        assert item.video is not None
        caption = unit(reference.caption(item.candidate))
        bare.append(2.5 * max(float(caption @ unit(hand_video(reference, item.video.load()))), 0))
    assert scores["clipscore"] == pytest.approx(bare, abs=1e-5)
    prompted = [hand_clip_s(reference, item, "A photo depicts") for item in items]
    assert not np.allclose(bare, prompted)


def test_l_clipscore_uses_the_l_clip_checkpoint(checkpoints, items) -> None:  # type: ignore[no-untyped-def]
    settings = {"clip_model": str(checkpoints["clip"]), "lclip_model": str(checkpoints["lclip"])}
    scores = scores_of(["clipscore", "lclipscore", "reflclipscore"], settings, items)
    lclip = Reference(checkpoints["lclip"])
    assert scores["lclipscore"] == pytest.approx(
        [hand_clip_s(lclip, item, "A photo depicts") for item in items], abs=1e-5
    )
    assert scores["reflclipscore"] == pytest.approx(
        [hand_ref_clip_s(lclip, item, "A photo depicts") for item in items], abs=1e-5
    )
    assert not np.allclose(scores["lclipscore"], scores["clipscore"])


def hand_idf(reference: Reference, corpus: list[str]) -> dict[int, float]:
    # As EMScore's get_idf_dict over clip.tokenize's 77-wide contexts: a caption shorter than the
    # context also holds the padding id 0.
    documents = [
        set(ids) | ({0} if len(ids) < 77 else set())
        for ids in (reference.token_ids(text) for text in corpus)
    ]
    frequency = Counter(token for document in documents for token in document)
    idf = {token: math.log((len(corpus) + 1) / (count + 1)) for token, count in frequency.items()}
    end = reference.tokenizer.eos_token_id
    idf[end] = sum(idf.values()) / len(idf)
    return idf


def hand_matching(
    tokens: np.ndarray, weights: np.ndarray, targets: np.ndarray, target_weights: np.ndarray | None
) -> tuple[float, float, float]:
    similarity = unit(tokens) @ unit(targets).T
    precision = float((similarity.max(axis=1) * weights).sum() / weights.sum())
    if target_weights is None:
        recall = float(similarity.max(axis=0).mean())
    else:
        recall = float((similarity.max(axis=0) * target_weights).sum() / target_weights.sum())
    return precision, recall, 2 * precision * recall / (precision + recall)


def hand_emscore(
    reference: Reference,
    items: list[MetricItem],
    *,
    with_references: bool,
    idf: bool,
    corpus: list[str] | None = None,
) -> list[float]:
    if corpus is None:
        corpus = (
            [ref for item in items for ref in item.references]
            if with_references
            else [item.candidate for item in items]
        )
    table = hand_idf(reference, corpus) if idf else {}
    unseen = math.log(len(corpus) + 1)

    def weights(text: str) -> np.ndarray:
        ids = reference.token_ids(text)
        return np.array([table.get(t, unseen) for t in ids]) if idf else np.ones(len(ids))

    results = []
    for item in items:
        assert item.video is not None
        tokens = reference.tokens(item.candidate)
        caption = unit(reference.caption(item.candidate))
        frame_embeddings = reference.frames(item.video.load())
        coarse = float(caption @ unit(unit(frame_embeddings).mean(axis=0)))
        _, _, fine = hand_matching(tokens, weights(item.candidate), frame_embeddings, None)
        video_score = (coarse + fine) / 2
        if not with_references:
            results.append(video_score)
            continue
        best_f = max(
            hand_matching(tokens, weights(item.candidate), reference.tokens(ref), weights(ref))[2]
            for ref in item.references
        )
        best_coarse = max(float(caption @ unit(reference.caption(ref))) for ref in item.references)
        results.append((video_score + (best_coarse + best_f) / 2) / 2)
    return results


@pytest.mark.parametrize("idf", [True, False], ids=["idf", "no-idf"])
def test_emscore_equals_the_hand_computation(checkpoints, items, reference, idf: bool) -> None:  # type: ignore[no-untyped-def]
    settings = {"clip_model": str(checkpoints["clip"]), "emscore_idf": str(idf).lower()}
    scores = scores_of(["emscore", "emscore_ref"], settings, items)
    assert scores["emscore"] == pytest.approx(
        hand_emscore(reference, items, with_references=False, idf=idf), abs=1e-5
    )
    assert scores["emscore_ref"] == pytest.approx(
        hand_emscore(reference, items, with_references=True, idf=idf), abs=1e-5
    )


IDF_CORPUS = [
    "a man is playing a guitar",
    "a woman cooks dinner in a kitchen",
    "a dog runs across a park",
    "two children play with a ball",
    "a cat sleeps",
]


def test_emscore_with_an_idf_corpus_file_equals_the_hand_computation(
    checkpoints, items, reference, tmp_path
) -> None:  # type: ignore[no-untyped-def]
    """The IDF taken from a file of captions (the authors' VATEX-EVAL protocol takes it from the
    VATEX training captions), for candidate and reference tokens alike, reference-free or not."""
    corpus_file = tmp_path / "corpus.txt"
    corpus_file.write_text("\n".join(IDF_CORPUS) + "\n\n", encoding="utf-8")
    settings = {"clip_model": str(checkpoints["clip"]), "emscore_idf_corpus": str(corpus_file)}
    scores = scores_of(["emscore", "emscore_ref"], settings, items)
    for name, with_references in (("emscore", False), ("emscore_ref", True)):
        expected = hand_emscore(
            reference, items, with_references=with_references, idf=True, corpus=IDF_CORPUS
        )
        assert scores[name] == pytest.approx(expected, abs=1e-5)
        batch = hand_emscore(reference, items, with_references=with_references, idf=True)
        assert not np.allclose(expected, batch, atol=1e-4)  # the corpus changes the scores


def test_idf_weights_follow_emscore_s_formula_on_a_tiny_corpus() -> None:
    """By hand, N = 3 documents of ids (start 10, end 99), context 77 (all are shorter, so each
    also holds the padding id 0), the last one 77 ids long when `full` (then it holds no 0):
    idf = ln((N + 1) / (df + 1)); the end token gets the mean of every idf, its own included."""
    from training_bridge.metrics.clip import idf_weights

    documents = [[10, 5, 7, 99], [10, 5, 99], [10, 8, 8, 99]]
    weights = idf_weights(documents, 99)
    ln = np.log
    expected = {
        10: ln(4 / 4),  # in all three
        5: ln(4 / 3),  # in two
        7: ln(4 / 2),
        8: ln(4 / 2),  # twice in one document: df 1
        0: ln(4 / 4),  # the padding of all three contexts
    }
    expected[99] = (sum(expected.values()) + ln(4 / 4)) / 6  # mean over the 6 ids, 99's own 0
    assert weights == pytest.approx(expected, abs=1e-15)
    assert set(weights) == set(expected)

    full = [[10, *([5] * 75), 99], [10, 7, 99]]  # the first fills the 77-id context
    weights = idf_weights(full, 99)
    assert weights[0] == pytest.approx(ln(3 / 2), abs=1e-15)  # only the short one is padded
    no_padding = idf_weights(documents, 99, context_length=None)
    assert 0 not in no_padding
    assert no_padding[99] == pytest.approx((ln(4 / 3) + 2 * ln(4 / 2)) / 5, abs=1e-15)


def test_idf_corpus_files_in_each_documented_format(tmp_path) -> None:  # type: ignore[no-untyped-def]
    import json

    from training_bridge.metrics.clip import read_caption_corpus

    (tmp_path / "lines.txt").write_text("a dog runs\n\n  a cat sleeps \n", encoding="utf-8")
    (tmp_path / "list.json").write_text(json.dumps(["a dog runs", "a cat sleeps"]))
    (tmp_path / "emscore.json").write_text(
        json.dumps({"v1": ["a dog runs"], "v2": ["a cat sleeps"]})
    )
    (tmp_path / "vatex.json").write_text(
        json.dumps(
            [
                {"videoID": "v1", "enCap": ["a dog runs"], "chCap": ["狗在跑"]},
                {"videoID": "v2", "enCap": ["a cat sleeps"], "chCap": ["猫在睡"]},
            ]
        )
    )
    for name in ("lines.txt", "list.json", "emscore.json", "vatex.json"):
        assert read_caption_corpus(tmp_path / name) == ["a dog runs", "a cat sleeps"], name
    (tmp_path / "empty.txt").write_text("\n\n", encoding="utf-8")
    with pytest.raises(ValueError, match="holds no caption"):
        read_caption_corpus(tmp_path / "empty.txt")
    (tmp_path / "bad.json").write_text(json.dumps({"v1": "not a list"}))
    with pytest.raises(ValueError, match="expected a list of captions"):
        read_caption_corpus(tmp_path / "bad.json")
    with pytest.raises(ValueError, match=r"emscore_idf_corpus=.*: no such file"):
        parse_settings({"emscore_idf_corpus": str(tmp_path / "missing.txt")})
    assert parse_settings(
        {"emscore_idf_corpus": str(tmp_path / "list.json")}
    ).emscore_idf_corpus == str(tmp_path / "list.json")


def test_the_token_embedding_at_end_of_text_is_clip_s_caption_embedding(
    checkpoints, reference
) -> None:  # type: ignore[no-untyped-def]
    """EMScore's coarse caption embedding (the end-of-text token of the token embeddings) is the
    one CLIP-S uses (`get_text_features`)."""
    text = "a man plays a guitar"
    assert unit(reference.tokens(text)[-1]) == pytest.approx(
        unit(reference.caption(text)), abs=1e-6
    )


def test_video_is_embedded_once_per_key(checkpoints, frames) -> None:  # type: ignore[no-untyped-def]
    loads: list[str] = []

    def video(key: str) -> Video:
        def load() -> np.ndarray:
            loads.append(key)
            return frames[key]

        return Video(key, load)

    same = [MetricItem(text, refs, video("clip-0")) for text, refs in CAPTIONS[:4]]
    metrics, _ = available_metrics(
        {"clip_model": str(checkpoints["clip"])}, ["clipscore", "emscore", "emscore_ref"]
    )
    score_metrics(metrics, same)
    assert loads == ["clip-0"]


def test_standard_metrics_through_the_interface_equal_the_direct_call(items) -> None:  # type: ignore[no-untyped-def]
    names = ["bleu1", "bleu4", "rougeL", "cider"]
    metrics, unavailable = available_metrics({}, names)
    assert unavailable == {} and list(metrics) == names
    for metric in metrics.values():
        assert isinstance(metric, CaptionMetric)
        assert metric.needs_references and not metric.needs_video
    together, failed = score_metrics(metrics, items)
    assert failed == {}
    direct = standard_metric_scores(
        [item.candidate for item in items],
        [list(item.references) for item in items],
        metrics=names,
    )
    for name in names:
        assert together[name] == pytest.approx(direct[name], abs=1e-12)
        # One metric scored alone through `score` gives the same (CIDEr's IDF from the same batch).
        assert metrics[name].score(items) == pytest.approx(direct[name], abs=1e-12)


def test_every_metric_is_either_available_or_unavailable_with_a_reason(monkeypatch) -> None:  # type: ignore[no-untyped-def]
    monkeypatch.delenv("LEPUS_CLIP_MODEL", raising=False)
    monkeypatch.delenv("LEPUS_LCLIP_MODEL", raising=False)
    for variable in ENVIRONMENT.values():
        monkeypatch.delenv(variable, raising=False)
    monkeypatch.delenv("LEPUS_JUDGE_MODEL", raising=False)
    monkeypatch.delenv("LEPUS_CAPTIONQA_MODEL", raising=False)
    monkeypatch.setenv("PATH", "/nonexistent")  # no java: METEOR unavailable too
    metrics, unavailable = available_metrics()
    assert list(metrics) + list(unavailable) != []
    assert set(metrics) | set(unavailable) == set(TABLE_METRICS)
    assert not set(metrics) & set(unavailable)
    assert unavailable == {
        "meteor": "METEOR needs Java, and no `java` executable is on the PATH",
        **{
            name: "no weights given: set clip_model=PATH or a model id in the local Hugging "
            "Face cache"
            for name in ("clipscore", "refclipscore", "emscore", "emscore_ref")
        },
        **{
            name: "no weights given: set lclip_model=PATH or a model id in the local Hugging "
            "Face cache"
            for name in ("lclipscore", "reflclipscore")
        },
        **{
            name: f"no weights given: set {setting}=PATH or a model id in the local Hugging "
            "Face cache"
            for name, setting in (
                ("pacs", "pacs_model"),
                ("refpacs", "pacs_model"),
                ("pacs_plus", "pacs_plus_model"),
                ("refpacs_plus", "pacs_plus_model"),
                ("factvc", "factvc_model"),
                ("factvc_ref", "factvc_model"),
            )
        },
        "polos": "no weights given: set polos_model=DIR (polos.json + head.pt, see "
        "docs/metrics.md)",
        "redemption": "; ".join(
            [
                *(
                    f"no weights given: set {setting}=PATH or a model id in the local Hugging "
                    "Face cache"
                    for setting in ("redemption_clip_model", "dino_model", "gte_model")
                ),
                "no text-to-image generator given: set t2i_model=PATH",
            ]
        ),
        **{
            name: "no weights given: set judge_model=PATH or a model id in the local Hugging "
            "Face cache"
            for name in ("expert_judge", "gveval_judge")
        },
        "captionqa": "no weights given: set captionqa_model=PATH or a model id in the local "
        "Hugging Face cache",
    }
    assert set(TABLE_METRICS) <= set(METRIC_NAMES)


def test_weights_that_are_not_there_are_reported(tmp_path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    import huggingface_hub.constants

    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_CACHE", str(tmp_path / "hub"))
    _, unavailable = available_metrics({"clip_model": str(tmp_path / "missing")}, ["clipscore"])
    assert unavailable == {"clipscore": f"clip_model={tmp_path / 'missing'}: no such directory"}

    (tmp_path / "empty").mkdir()
    _, unavailable = available_metrics({"lclip_model": str(tmp_path / "empty")}, ["lclipscore"])
    assert unavailable == {
        "lclipscore": f"lclip_model={tmp_path / 'empty'}: no config.json there "
        "(a transformers checkpoint is needed)"
    }

    # A model id is looked up in the local cache only: nothing is downloaded.
    _, unavailable = available_metrics({"clip_model": "openai/clip-vit-base-patch32"}, ["emscore"])
    assert unavailable == {
        "emscore": "clip_model=openai/clip-vit-base-patch32: not a directory and not in the local "
        "Hugging Face cache (nothing is downloaded; give a local path)"
    }
    snapshot = tmp_path / "hub" / "models--someone--clip" / "snapshots" / "abc"
    snapshot.mkdir(parents=True)
    (snapshot / "config.json").write_text("{}")
    (snapshot.parent.parent / "refs").mkdir()
    (snapshot.parent.parent / "refs" / "main").write_text("abc")
    metrics, unavailable = available_metrics({"clip_model": "someone/clip"}, ["emscore"])
    assert unavailable == {} and list(metrics) == ["emscore"]


def test_weights_that_do_not_load_are_reported_when_scoring(tmp_path, items) -> None:  # type: ignore[no-untyped-def]
    broken = tmp_path / "broken"
    broken.mkdir()
    (broken / "config.json").write_text('{"model_type": "clip"}')
    metrics, unavailable = available_metrics({"clip_model": str(broken)}, ["cider", "clipscore"])
    assert unavailable == {}
    scores, failed = score_metrics(metrics, items)
    assert list(scores) == ["cider"]
    assert list(failed) == ["clipscore"]
    assert failed["clipscore"].startswith(f"could not load {broken} offline: ")


def test_items_without_video_or_references_are_reported(checkpoints, items) -> None:  # type: ignore[no-untyped-def]
    partial = [MetricItem(items[0].candidate, ()), items[1]]
    metrics, _ = available_metrics(
        {"clip_model": str(checkpoints["clip"])}, ["clipscore", "rougeL", "emscore"]
    )
    scores, failed = score_metrics(metrics, partial)
    assert scores == {}
    assert failed == {
        "clipscore": "needs the video, and 1 of 2 candidates have no frames",
        "rougeL": "needs references, and 1 of 2 candidates have none",
        "emscore": "needs the video, and 1 of 2 candidates have no frames",
    }


def test_settings_are_checked() -> None:
    with pytest.raises(ValueError, match="unknown setting"):
        available_metrics({"clip_modle": "x"})
    with pytest.raises(ValueError, match="unknown metric"):
        available_metrics({}, ["clipscore", "bertscore"])
    with pytest.raises(ValueError, match="batch_size must be a whole number"):
        parse_settings({"batch_size": "many"})
    with pytest.raises(ValueError, match="emscore_idf must be true or false"):
        parse_settings({"emscore_idf": "maybe"})
    settings = parse_settings({"frames": "4", "emscore_idf": "false", "clip_prompt": ""})
    assert (settings.frames, settings.emscore_idf, settings.clip_prompt) == (4, False, "")


def test_the_run_evaluation_table_lists_the_learned_metrics_it_cannot_score(
    checkpoints, items, monkeypatch
) -> None:  # type: ignore[no-untyped-def]
    """A training run's evaluation table (no frames there) scores the standard metrics through the
    registry and names every learned baseline it leaves out, with the reason."""
    from training_bridge.rigel.evaluate import evaluate_split

    monkeypatch.delenv("LEPUS_LCLIP_MODEL", raising=False)
    monkeypatch.setenv("LEPUS_CLIP_MODEL", str(checkpoints["clip"]))
    human = np.linspace(0.0, 1.0, len(items))
    block = evaluate_split(
        rigel_scores=human[::-1].copy(),
        human=human,
        candidates=[item.candidate for item in items],
        references=[list(item.references) for item in items],
        standard_metrics=("bleu4", "cider"),
    )
    assert set(block["rows"]) == {"rigel", "bleu4", "cider"}
    no_frames = f"needs the video, and {len(items)} of {len(items)} candidates have no frames"
    no_weights = (
        "no weights given: set lclip_model=PATH or a model id in the local Hugging Face cache"
    )
    assert block["notes"] == [
        f"CLIP-S not computed: {no_frames}",
        f"RefCLIP-S not computed: {no_frames}",
        f"EMScore not computed: {no_frames}",
        f"EMScore (ref) not computed: {no_frames}",
        f"L-CLIPScore not computed: {no_weights}",
        f"RefL-CLIPScore not computed: {no_weights}",
    ]
