"""The learned baselines on a CLIP dual encoder: CLIP-S and RefCLIP-S (Hessel et al., EMNLP 2021),
L-CLIPScore (Li et al., seed 001: the same formulas on an L-CLIP checkpoint) and EMScore (Shi et
al., CVPR 2022), as `plugins.CaptionMetric`s. torch and transformers are imported only when weights
load; the formulas themselves are the NumPy functions below.

Embeddings (all L2-normalised; `ClipEncoder`):
- a caption: the projected output of CLIP's text transformer at the end-of-text token (what
  `CLIPModel.get_text_features` returns), and for EMScore also every token from start-of-text to
  end-of-text projected the same way (EMScore's `encode_text(..., local=True)`);
- a frame: the projected pooled output of the vision transformer (`get_image_features`), after the
  checkpoint's own image processor (CLIP's: bicubic resize of the short side, centre crop,
  normalisation);
- a video: `video_embedding(frames)` = the arithmetic mean of the L2-normalised frame embeddings
  (then normalised by the cosine). This is EMScore's video embedding, and the one CLIP-S and
  RefCLIP-S use for a video in place of the image embedding.

Formulas (c caption, v video, r reference; cos of normalised vectors):
- CLIP-S(c, v) = w · max(cos(c, v), 0), w = 2.5;
- RefCLIP-S(c, R, v) = H-Mean(CLIP-S(c, v), max(max_{r∈R} cos(c, r), 0)) (0 when either is 0);
  L-CLIPScore and RefL-CLIPScore: the same on L-CLIP (seed 001, Eq. 3 and 4);
  every caption and reference is prefixed with `prompt` ("A photo depicts" by default, as
  the CLIPScore reference code `jmhessel/clipscore` does for both);
- EMScore(c, v) = (coarse + fine F) / 2: coarse = cos(c_EOT, v); fine: token embeddings x_j of c
  against frame embeddings f_i, P = Σ_j idf_j max_i x_j·f_i / Σ_j idf_j, R = mean_i max_j f_i·x_j,
  F = 2PR/(P+R);
  EMScore(c, R, v) = (EMScore(c, v) + EMScore(c, R)) / 2, where EMScore(c, R) takes, over the
  references, the best P, R, F (each separately) of the token-to-token matching (R weighted by the
  reference's idf) and the best coarse cos(c_EOT, r_EOT), then (coarse + F) / 2.
  IDF (`idf=True`, default), EMScore's formula (`emscore/utils.py`, `get_idf_dict`, and
  `emscore/scorer.py` of ShiYaya/emscore): over a corpus of N captions, each tokenised as CLIP's
  `clip.tokenize` does into a 77-wide context padded with token id 0, df(t) counts the captions
  whose padded token set holds t — so every caption shorter than the context also "holds" id 0
  (which is also the vocabulary's "!") — and idf(t) = ln((N + 1) / (df(t) + 1)); a token never
  seen gets ln(N + 1); the end-of-text token's idf is then replaced by the mean of every idf in
  the table (padding id, start- and end-of-text included). The corpus:
  - `idf_corpus` given (a file of captions, `read_caption_corpus`): that corpus for both the
    candidate's and the references' tokens, reference-free or not — the authors' VATEX-EVAL run
    (VATEX-EVAL-demo.py) takes it from the VATEX *training* captions;
  - otherwise the scored batch, as EMScorer.score does with `idf=True`: its N references (one per
    candidate and reference, as the scorer flattens them) for the reference-based EMScore, its N
    candidates for the reference-free one.
  Captions are tokenised without a prompt, as EMScore does.
  Differences from EMScore's code, on purpose: frames are the clip's sampled frames (EMScore's
  VATEX-EVAL run embeds every decoded frame and keeps 10 at int(linspace(0, T - 1, 10)); ours
  round the linspace); max over frames/tokens ignores padding (EMScore's batched code multiplies
  padded similarities by 0, so a row of negative similarities can max out at 0); P + R = 0 gives
  F = 0 instead of NaN; a caption past 77 tokens is truncated (clip.tokenize raises).
"""

from __future__ import annotations

import json
import math
import os
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from training_bridge.metrics.interface import LABELS, MetricItem, Video
from training_bridge.metrics.standard import MetricUnavailable

CLIP_S_WEIGHT = 2.5


# ------------------------------------------------------------------------------------------------
# Formulas (NumPy)


def normalized(vectors: np.ndarray) -> np.ndarray:
    vectors = np.asarray(vectors, dtype=np.float64)
    norms = np.linalg.norm(vectors, axis=-1, keepdims=True)
    return vectors / np.where(norms == 0, 1.0, norms)


def video_embedding(frame_embeddings: np.ndarray) -> np.ndarray:
    """The mean of the L2-normalised frame embeddings, normalised."""
    return normalized(normalized(frame_embeddings).mean(axis=0))


def clip_s(captions: np.ndarray, visual: np.ndarray, weight: float = CLIP_S_WEIGHT) -> np.ndarray:
    """w · max(cos(c, v), 0) row by row."""
    cosine = np.sum(normalized(captions) * normalized(visual), axis=-1)
    return weight * np.maximum(cosine, 0.0)


def harmonic_mean(first: np.ndarray, second: np.ndarray) -> np.ndarray:
    first, second = np.asarray(first, dtype=np.float64), np.asarray(second, dtype=np.float64)
    total = first + second
    safe = np.where(total > 0, total, 1.0)
    return np.where(total > 0, 2 * first * second / safe, 0.0)


def reference_similarity(caption: np.ndarray, references: np.ndarray) -> float:
    """max(max_r cos(c, r), 0)."""
    return max(float(np.max(normalized(references) @ normalized(caption))), 0.0)


@dataclass(frozen=True)
class Matching:
    precision: float
    recall: float
    f: float


def greedy_matching(
    tokens: np.ndarray,
    token_weights: np.ndarray,
    targets: np.ndarray,
    target_weights: np.ndarray | None = None,
) -> Matching:
    """EMScore's fine-grained matching: every candidate token to its best target (precision,
    weighted by `token_weights`), every target to its best token (recall, weighted by
    `target_weights`, plain mean when None), F their harmonic mean."""
    similarity = normalized(tokens) @ normalized(targets).T  # (tokens, targets)
    weights = np.asarray(token_weights, dtype=np.float64)
    precision = float(np.sum(similarity.max(axis=1) * weights) / np.sum(weights))
    best_per_target = similarity.max(axis=0)
    if target_weights is None:
        recall = float(best_per_target.mean())
    else:
        target = np.asarray(target_weights, dtype=np.float64)
        recall = float(np.sum(best_per_target * target) / np.sum(target))
    total = precision + recall
    return Matching(precision, recall, 2 * precision * recall / total if total != 0 else 0.0)


# EMScore tokenises with clip.tokenize: a context of 77 ids, padded with id 0.
EMSCORE_CONTEXT = 77
EMSCORE_PADDING_TOKEN = 0


def idf_weights(
    documents: Sequence[Sequence[int]],
    end_token: int | None,
    *,
    context_length: int | None = EMSCORE_CONTEXT,
    padding_token: int = EMSCORE_PADDING_TOKEN,
) -> dict[int, float]:
    """{token id: ln((N+1)/(df+1))} over the documents, EMScore's way: a document shorter than
    `context_length` also holds `padding_token` (its padded context does); then the end token
    gets the mean of all the values. `context_length=None`: no padding counted."""
    count = len(documents)
    frequency: Counter[int] = Counter()
    for document in documents:
        tokens = set(document)
        if context_length is not None and len(document) < context_length:
            tokens.add(padding_token)
        frequency.update(tokens)
    weights = {token: math.log((count + 1) / (seen + 1)) for token, seen in frequency.items()}
    if end_token is not None and weights:
        weights[end_token] = sum(weights.values()) / len(weights)
    return weights


def read_caption_corpus(path: str | os.PathLike[str]) -> list[str]:
    """The captions of an IDF corpus file, in file order:

    - `.json`: a list of captions; or {id: [captions]} (the `vatex_train_en_annotations.json` the
      EMScore authors' VATEX-EVAL script reads); or a list of {"enCap": [captions], ...} (VATEX's
      own `vatex_training_v1.0.json`: its English captions);
    - anything else: UTF-8 text, one caption per non-empty line.

    Raises ValueError on a file it cannot read as one of these, or one without captions."""
    file = Path(path)
    try:
        text = file.read_text(encoding="utf-8")
    except OSError as error:
        raise ValueError(f"cannot read the IDF corpus {file}: {error}") from error
    captions: list[str] = []
    if file.suffix.lower() == ".json":
        try:
            data = json.loads(text)
        except json.JSONDecodeError as error:
            raise ValueError(f"the IDF corpus {file} is not valid JSON: {error}") from error
        groups: list[Any]
        if isinstance(data, dict):
            groups = list(data.values())
        elif isinstance(data, list) and all(isinstance(entry, dict) for entry in data):
            groups = [entry.get("enCap") for entry in data]
        else:
            groups = [data]
        for group in groups:
            if not isinstance(group, list) or not all(isinstance(c, str) for c in group):
                raise ValueError(
                    f"the IDF corpus {file}: expected a list of captions, {{id: [captions]}} or "
                    'VATEX\'s [{"enCap": [captions]}]'
                )
            captions.extend(group)
    else:
        captions = [line.strip() for line in text.splitlines()]
    captions = [caption for caption in captions if caption.strip()]
    if not captions:
        raise ValueError(f"the IDF corpus {file} holds no caption")
    return captions


# ------------------------------------------------------------------------------------------------
# Encoder


@dataclass
class TextEmbedding:
    token_ids: np.ndarray  # (L,) from start-of-text to end-of-text
    tokens: np.ndarray  # (L, d) float32, normalised projected token embeddings
    caption: np.ndarray  # (d,) float32, normalised, the end-of-text token's


class ClipEncoder:
    """A CLIP-layout dual encoder (transformers `CLIPModel` or any checkpoint with its
    `text_model`, `vision_model`, `text_projection`, `visual_projection`), loaded offline on first
    use, with caches of what it embedded (texts by text, videos by key)."""

    def __init__(self, model: str, *, device: str = "cpu", batch_size: int = 64) -> None:
        self.model_name = model
        self.device = device
        self.batch_size = batch_size
        self._loaded: tuple[Any, Any, Any] | None = None
        self._texts: dict[str, TextEmbedding] = {}
        self._videos: dict[str, np.ndarray] = {}

    def _load(self) -> tuple[Any, Any, Any]:
        if self._loaded is not None:
            return self._loaded
        try:
            from transformers import AutoImageProcessor, AutoModel, AutoTokenizer

            # local_files_only: a directory, or a model id already in the local cache; never a
            # download.
            model = AutoModel.from_pretrained(self.model_name, local_files_only=True)
            tokenizer = AutoTokenizer.from_pretrained(self.model_name, local_files_only=True)
            processor = AutoImageProcessor.from_pretrained(self.model_name, local_files_only=True)
        except Exception as error:
            raise MetricUnavailable(
                f"could not load {self.model_name} offline: {type(error).__name__}: {error}"
            ) from error
        missing = [
            part
            for part in ("text_model", "vision_model", "text_projection", "visual_projection")
            if not hasattr(model, part)
        ]
        if missing:
            raise MetricUnavailable(
                f"{self.model_name} is not a CLIP dual encoder (no {', '.join(missing)})"
            )
        model.to(self.device).eval()
        self._loaded = (model, tokenizer, processor)
        return self._loaded

    def texts(self, texts: Sequence[str]) -> list[TextEmbedding]:
        """The embeddings of these texts (each distinct text encoded once)."""
        todo = list(dict.fromkeys(text for text in texts if text not in self._texts))
        if todo:
            import torch

            model, tokenizer, _ = self._load()
            limit = self._text_limit()
            for start in range(0, len(todo), self.batch_size):
                batch = todo[start : start + self.batch_size]
                encoded = tokenizer(
                    batch, padding=True, truncation=True, max_length=limit, return_tensors="pt"
                )
                ids = encoded["input_ids"].to(self.device)
                mask = encoded["attention_mask"].to(self.device)
                with torch.inference_mode():
                    hidden = model.text_model(input_ids=ids, attention_mask=mask).last_hidden_state
                    projected = model.text_projection(hidden).float()
                projected = torch.nn.functional.normalize(projected, dim=-1).cpu().numpy()
                lengths = mask.sum(dim=1).cpu().numpy()
                for row, text in enumerate(batch):
                    length = int(lengths[row])
                    # float32 in the cache (a VATEX-EVAL run holds ~35,000 texts); the formulas
                    # compute in float64.
                    tokens = projected[row, :length].copy()
                    self._texts[text] = TextEmbedding(
                        token_ids=ids[row, :length].cpu().numpy(),
                        tokens=tokens,
                        caption=tokens[length - 1],
                    )
        return [self._texts[text] for text in texts]

    def _text_limit(self) -> int:
        """Tokens the text encoder takes (77 for CLIP); longer captions are truncated, keeping
        the end-of-text token, as CLIP's own tokenizer does."""
        model, _, _ = self._load()
        return int(getattr(model.config.text_config, "max_position_embeddings", 77))

    def token_ids(self, texts: Sequence[str]) -> list[list[int]]:
        """Token ids (start to end of text, truncated as for the model) for IDF."""
        _, tokenizer, _ = self._load()
        encoded = tokenizer(list(texts), truncation=True, max_length=self._text_limit())
        return [list(ids) for ids in encoded["input_ids"]]

    def context_length(self) -> int:
        return self._text_limit()

    def end_token_id(self) -> int | None:
        _, tokenizer, _ = self._load()
        end = tokenizer.eos_token_id
        return None if end is None else int(end)

    def frames(self, video: Video) -> np.ndarray:
        """(T, d) normalised embeddings of the video's frames (each video key embedded once)."""
        cached = self._videos.get(video.key)
        if cached is not None:
            return cached
        import torch

        model, _, processor = self._load()
        frames = np.asarray(video.load())
        if frames.ndim != 4 or frames.shape[-1] != 3 or len(frames) == 0:
            raise ValueError(f"video {video.key}: frames must be (T, H, W, 3), not {frames.shape}")
        embeddings = []
        for start in range(0, len(frames), self.batch_size):
            pixels = processor(
                images=list(frames[start : start + self.batch_size]),
                return_tensors="pt",
                input_data_format="channels_last",
            )["pixel_values"].to(self.device)
            with torch.inference_mode():
                pooled = model.vision_model(pixel_values=pixels).pooler_output
                embeddings.append(model.visual_projection(pooled).float().cpu().numpy())
        result = normalized(np.concatenate(embeddings))
        self._videos[video.key] = result
        return result


# ------------------------------------------------------------------------------------------------
# Plug-ins


def _prompted(prompt: str, text: str) -> str:
    return f"{prompt} {text}" if prompt else text


@dataclass
class _ClipMetric:
    """What the CLIP-based plug-ins share: a name, an encoder, with or without references."""

    name: str
    encoder: ClipEncoder
    with_references: bool = False
    label: str = ""
    needs_references: bool = field(init=False)
    needs_video: bool = field(init=False, default=True)

    def __post_init__(self) -> None:
        self.label = self.label or LABELS.get(self.name, self.name)
        self.needs_references = self.with_references


@dataclass
class ClipScore(_ClipMetric):
    """CLIP-S (`with_references=False`) or RefCLIP-S on a `ClipEncoder`; with an L-CLIP encoder,
    L-CLIPScore and RefL-CLIPScore."""

    prompt: str = "A photo depicts"
    weight: float = CLIP_S_WEIGHT

    def score(self, items: Sequence[MetricItem]) -> list[float]:
        if not items:
            return []
        captions = np.stack(
            [
                embedding.caption
                for embedding in self.encoder.texts(
                    [_prompted(self.prompt, item.candidate) for item in items]
                )
            ]
        )
        visual = np.stack([video_embedding(self.encoder.frames(_video(item))) for item in items])
        scores = clip_s(captions, visual, self.weight)
        if not self.with_references:
            return [float(value) for value in scores]
        # Every reference encoded in full batches first (the loop below then reads the cache).
        self.encoder.texts(
            [_prompted(self.prompt, ref) for item in items for ref in item.references]
        )
        text_side = np.array(
            [
                reference_similarity(
                    captions[index],
                    np.stack(
                        [
                            embedding.caption
                            for embedding in self.encoder.texts(
                                [_prompted(self.prompt, ref) for ref in item.references]
                            )
                        ]
                    ),
                )
                for index, item in enumerate(items)
            ]
        )
        return [float(value) for value in harmonic_mean(scores, text_side)]


@dataclass(frozen=True)
class EMScoreParts:
    """One candidate's EMScore terms: against the video, and (with references) the best over them."""

    video_coarse: float
    video_fine: Matching
    reference_coarse: float | None = None
    reference_fine: Matching | None = None

    @property
    def video_score(self) -> float:
        return (self.video_coarse + self.video_fine.f) / 2

    @property
    def reference_score(self) -> float | None:
        if self.reference_coarse is None or self.reference_fine is None:
            return None
        return (self.reference_coarse + self.reference_fine.f) / 2

    @property
    def score(self) -> float:
        reference = self.reference_score
        return self.video_score if reference is None else (self.video_score + reference) / 2


@dataclass
class EMScore(_ClipMetric):
    """EMScore(X, V) (`with_references=False`) or EMScore(X, X*, V)."""

    idf: bool = True
    # A file of captions to take the IDF from (`read_caption_corpus`); None: the scored batch.
    idf_corpus: str | None = None
    _corpus_table: tuple[dict[int, float], float] | None = field(default=None, init=False)

    def score(self, items: Sequence[MetricItem]) -> list[float]:
        return [parts.score for parts in self.parts(items)]

    def idf_table(self, corpus: Sequence[str]) -> tuple[dict[int, float], float]:
        """EMScore's idf over `corpus` and the idf of a token it never saw."""
        table = idf_weights(
            self.encoder.token_ids(corpus),
            self.encoder.end_token_id(),
            context_length=self.encoder.context_length(),
        )
        return table, math.log(len(corpus) + 1)

    def token_weights(self, items: Sequence[MetricItem]) -> Callable[[np.ndarray], np.ndarray]:
        """Weights of a text's tokens: idf over the corpus file, else over this batch's corpus
        (see the module docstring), or all 1 without idf."""
        if not self.idf:
            return lambda ids: np.ones(len(ids))
        if self.idf_corpus is not None:
            if self._corpus_table is None:  # tokenised once per metric object
                self._corpus_table = self.idf_table(read_caption_corpus(self.idf_corpus))
            table, unseen = self._corpus_table
        else:
            corpus = (
                [ref for item in items for ref in item.references]
                if self.with_references
                else [item.candidate for item in items]
            )
            table, unseen = self.idf_table(corpus)
        return lambda ids: np.array([table.get(int(token), unseen) for token in ids])

    def parts(self, items: Sequence[MetricItem]) -> list[EMScoreParts]:
        if not items:
            return []
        weights = self.token_weights(items)
        candidates = self.encoder.texts([item.candidate for item in items])
        if self.with_references:
            # In full batches first; the loop below reads the cache.
            self.encoder.texts([ref for item in items for ref in item.references])
        results = []
        for item, candidate in zip(items, candidates, strict=True):
            frames = self.encoder.frames(_video(item))
            candidate_weights = weights(candidate.token_ids)
            video_coarse = float(normalized(candidate.caption) @ video_embedding(frames))
            video_fine = greedy_matching(candidate.tokens, candidate_weights, frames)
            if not self.with_references:
                results.append(EMScoreParts(video_coarse, video_fine))
                continue
            matchings, coarse = [], []
            for reference in self.encoder.texts(list(item.references)):
                matchings.append(
                    greedy_matching(
                        candidate.tokens,
                        candidate_weights,
                        reference.tokens,
                        weights(reference.token_ids),
                    )
                )
                coarse.append(float(normalized(candidate.caption) @ normalized(reference.caption)))
            best = Matching(
                max(m.precision for m in matchings),
                max(m.recall for m in matchings),
                max(m.f for m in matchings),
            )
            results.append(EMScoreParts(video_coarse, video_fine, max(coarse), best))
        return results


def _video(item: MetricItem) -> Video:
    if item.video is None:
        raise ValueError("this metric needs the video of every item")
    return item.video
