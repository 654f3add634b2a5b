"""Redemption Score (seed 002: "Redemption Score: A Multi-Modal Evaluation Framework for Image
Captioning via Distributional, Perceptual, and Linguistic Signal Triangulation", §3) as a
`plugins.CaptionMetric`, with its three signals, its fusion and the constrained grid search that
fits the fusion to human judgments.

Signals of a candidate c with references R on an image (for a video: its sampled frames, see
"Video" below):

- MID (seed 002 §3.1, Eq. 1-2, after Kim et al.'s Mutual Information Divergence, whose reference
  code is naver-ai/mid.metric `metrics/mid.py`, `_compute_pmi`): the L2-normalised CLIP embeddings
  x of the images and y of the candidates are taken as jointly Gaussian, with means and
  covariances estimated once from the whole scored set (seed 002 l.158); then
  PMI(x, y) = I(X; Y) + ½ (D²_M(x) + D²_M(y) − D²_M(z)),  I(X; Y) = ½ log(det Σx det Σy / det Σz),
  z = [x; y], D²_M(u) = (u − μ)ᵀ Σ⁻¹ (u − μ), covariances with the N − 1 denominator (as
  `_compute_pmi`). `mid_eps` (default 5e-4, the value `_compute_pmi`'s hint suggests for small
  sets) is added to every covariance's diagonal, so a set with fewer candidates than dimensions
  still has invertible covariances; 0 reproduces the unregularised formula.
- DINO (§3.2, Eq. 3-5): a text-to-image generator draws Ĩ_cand from c and Ĩ_ref from the first
  reference; ê(·) is the L2-normalised [CLS] embedding of a DINO ViT (ViT-B/8 in the paper);
  s1 = ⟨ê(I), ê(Ĩ_cand)⟩, s2 = ⟨ê(Ĩ_cand), ê(Ĩ_ref)⟩, DINO = (s1 + s2) / 2. The issue's "two
  generations averaged": `generations` (default 2) images per caption, one per seed 0..n-1, and
  DINO is the mean over the generations of (s1 + s2) / 2 (generation g of c against generation g
  of the reference).
- GTE (§3.3, Eq. 6): cos(e(c), e(r)) of a General Text Embeddings encoder (thenlper/gte-large in
  the paper), e = the attention-masked mean of the last hidden states, L2-normalised (the GTE
  model card's `average_pool`; recalled, unverified). The paper has one reference per candidate;
  with several we take the best (max over R), as RefCLIP-S does.

Normalisation (§3.4, Eq. 7): Z = (X / (1 + |X|) + 1) / 2 for each raw signal.
Fusion (Eq. 8): RS = λ (α Zmid + β Zdino + γ Zgte) + (1 − λ) Zmid^α Zdino^β Zgte^γ with
α + β + γ = 1 and each weight at least `minimum_weight` (0.15, seed 002 l.219-220 and l.240).
Fit (§3.4, l.227-229): a grid over α, β, γ in steps of 0.05 and λ in steps of 0.1 that maximises
Kendall τ against human scores (τ_c, the variant of the paper's Table 1, l.306; `variant`).
Published weights: (α, β, γ, λ) = (0.15, 0.30, 0.55, 0.8) in the text (seed 002 l.368) and
(0.15, 0.35, 0.5, 0.8) in Table 2's caption (l.374); the default here is the text's.

Video: I is the clip's sampled frames; ê(I) and the CLIP image embedding x are the mean of the
L2-normalised frame embeddings, normalised (EMScore's video embedding, `clip.video_embedding`).

Weights never come from the network: every encoder loads from a local directory or a model id in
the local Hugging Face cache; the generator is a diffusers Stable Diffusion 3 pipeline loaded the
same way (`t2i_model`), or any callable handed in (the tests draw images with a stand-in).
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, TypeVar

import numpy as np
from scipy import stats

from training_bridge.metrics.clip import ClipEncoder, normalized, video_embedding
from training_bridge.metrics.interface import LABELS, MetricItem, Video
from training_bridge.metrics.standard import MetricUnavailable

_T = TypeVar("_T")

MINIMUM_WEIGHT = 0.15  # seed 002 l.219-220
WEIGHT_STEP = 0.05  # seed 002 l.228
LAMBDA_STEP = 0.1  # seed 002 l.229
PUBLISHED_WEIGHTS = (0.15, 0.30, 0.55, 0.8)  # (α, β, γ, λ), seed 002 l.368
DEFAULT_MID_EPS = 5e-4
DEFAULT_GENERATIONS = 2

# A generator draws `count` images (uint8 (H, W, 3)) from a caption, generation g with seed g.
ImageGenerator = Callable[[str, int], list[np.ndarray]]


# ------------------------------------------------------------------------------------------------
# Formulas (NumPy)


def squash(values: np.ndarray | Sequence[float]) -> np.ndarray:
    """Eq. 7: (X / (1 + |X|) + 1) / 2, into (0, 1), increasing."""
    x = np.asarray(values, dtype=np.float64)
    return (x / (1 + np.abs(x)) + 1) / 2


def _covariance(centered: np.ndarray, eps: float) -> np.ndarray:
    count = centered.shape[0]
    covariance = centered.T @ centered / (count - 1)
    return covariance + eps * np.eye(covariance.shape[0])


def gaussian_pmi(
    images: np.ndarray, texts: np.ndarray, *, eps: float = DEFAULT_MID_EPS
) -> np.ndarray:
    """Per pair i, PMI(x_i, y_i) under the Gaussians fitted to all the pairs (see the module
    docstring); `images` (N, d) and `texts` (N, e) row-aligned."""
    x = np.asarray(images, dtype=np.float64)
    y = np.asarray(texts, dtype=np.float64)
    if x.ndim != 2 or y.ndim != 2 or len(x) != len(y):
        raise ValueError("images and texts must be row-aligned 2-D arrays")
    if len(x) < 2:
        raise ValueError("MID needs at least two pairs to estimate its Gaussians")
    z = np.concatenate([x, y], axis=1)
    terms = []
    log_dets = []
    for block in (x, y, z):
        centered = block - block.mean(axis=0)
        covariance = _covariance(centered, eps)
        sign, log_det = np.linalg.slogdet(covariance)
        if sign <= 0:
            raise ValueError(
                "a covariance of MID is singular (fewer pairs than dimensions?): set mid_eps > 0"
            )
        log_dets.append(log_det)
        solved = np.linalg.solve(covariance, centered.T).T
        terms.append(np.sum(centered * solved, axis=1))  # squared Mahalanobis distances
    mutual_information = (log_dets[0] + log_dets[1] - log_dets[2]) / 2
    return np.asarray(mutual_information + (terms[0] + terms[1] - terms[2]) / 2)


def dino_similarity(
    image: np.ndarray, candidate_images: np.ndarray, reference_images: np.ndarray
) -> float:
    """Eq. 3-5 averaged over generations: mean_g (⟨ê(I), ê(Ĩc_g)⟩ + ⟨ê(Ĩc_g), ê(Ĩr_g)⟩) / 2 for
    the DINO embeddings of the image (d,) and of the G generations (G, d) of candidate and
    reference."""
    source = normalized(image)
    candidates = normalized(candidate_images)
    references = normalized(reference_images)
    first = candidates @ source
    second = np.sum(candidates * references, axis=1)
    return float(np.mean((first + second) / 2))


def fuse(
    signals: np.ndarray, alpha: float, beta: float, gamma: float, interpolation: float
) -> np.ndarray:
    """Eq. 8 on normalised signals (N, 3) in the order MID, DINO, GTE."""
    z = np.asarray(signals, dtype=np.float64)
    weights = np.array([alpha, beta, gamma])
    linear = z @ weights
    geometric = np.prod(np.power(z, weights), axis=1)
    return np.asarray(interpolation * linear + (1 - interpolation) * geometric)


@dataclass(frozen=True)
class FusionFit:
    """The grid search's winner and the τ it reached on the data it was fitted on."""

    alpha: float
    beta: float
    gamma: float
    interpolation: float
    kendall: float
    tried: int

    def as_dict(self) -> dict[str, float | int]:
        return {
            "alpha": self.alpha,
            "beta": self.beta,
            "gamma": self.gamma,
            "lambda": self.interpolation,
            "kendall_fit": self.kendall,
            "grid_points": self.tried,
        }


def weight_grid(
    step: float = WEIGHT_STEP, minimum: float = MINIMUM_WEIGHT
) -> list[tuple[float, float, float]]:
    """Every (α, β, γ) on the `step` grid with α + β + γ = 1 and each ≥ `minimum`, counted in
    whole steps so the sum is exactly one."""
    units = round(1 / step)
    if not math.isclose(units * step, 1.0):
        raise ValueError("the weight step must divide 1")
    least = math.ceil(round(minimum / step, 9))
    grid = []
    for a in range(least, units + 1):
        for b in range(least, units - a + 1):
            c = units - a - b
            if c >= least:
                grid.append((a / units, b / units, c / units))
    return grid


def fit_fusion(
    signals: np.ndarray,
    human: np.ndarray | Sequence[float],
    *,
    weight_step: float = WEIGHT_STEP,
    lambda_step: float = LAMBDA_STEP,
    minimum_weight: float = MINIMUM_WEIGHT,
    variant: str = "c",
) -> FusionFit:
    """The constrained grid search of §3.4: the (α, β, γ, λ) whose fused score has the highest
    Kendall τ (`variant` "b" or "c") with `human`; ties keep the first in grid order (α, then β
    ascending, λ ascending)."""
    z = np.asarray(signals, dtype=np.float64)
    target = np.asarray(human, dtype=np.float64)
    if z.ndim != 2 or z.shape[1] != 3 or len(z) != len(target) or len(z) < 2:
        raise ValueError("signals must be (N, 3) with N >= 2 human scores")
    lambda_units = round(1 / lambda_step)
    lambdas = [k / lambda_units for k in range(lambda_units + 1)]
    best: FusionFit | None = None
    tried = 0
    for (alpha, beta, gamma), interpolation in itertools.product(
        weight_grid(weight_step, minimum_weight), lambdas
    ):
        tried += 1
        fused = fuse(z, alpha, beta, gamma, interpolation)
        if np.std(fused) == 0:
            continue
        tau = float(stats.kendalltau(fused, target, variant=variant).statistic)
        if best is None or tau > best.kendall:
            best = FusionFit(alpha, beta, gamma, interpolation, tau, 0)
    if best is None:
        raise ValueError("every fused score was constant; nothing to fit")
    return FusionFit(best.alpha, best.beta, best.gamma, best.interpolation, best.kendall, tried)


# ------------------------------------------------------------------------------------------------
# Encoders (torch/transformers, imported lazily)


def _offline(model: str, load: Callable[[], _T]) -> _T:
    """Weights are never downloaded here: whatever stops them loading is the metric's refusal."""
    try:
        return load()
    except Exception as error:
        raise MetricUnavailable(
            f"could not load {model} offline: {type(error).__name__}: {error}"
        ) from error


def _load(model: str, *, what: str) -> tuple[Any, Any]:
    def load() -> tuple[Any, Any]:
        from transformers import AutoImageProcessor, AutoModel, AutoTokenizer

        loaded = AutoModel.from_pretrained(model, local_files_only=True)
        if what == "image":
            return loaded, AutoImageProcessor.from_pretrained(model, local_files_only=True)
        return loaded, AutoTokenizer.from_pretrained(model, local_files_only=True)

    loaded, helper = _offline(model, load)
    return loaded.eval(), helper


class ImageEncoder:
    """A ViT (DINO) image encoder: the [CLS] token of the last hidden state, L2-normalised."""

    def __init__(self, model: str, *, device: str = "cpu", batch_size: int = 64) -> None:
        self.model_name, self.device, self.batch_size = model, device, batch_size
        self._loaded: tuple[Any, Any] | None = None
        self._videos: dict[str, np.ndarray] = {}

    def images(self, images: Sequence[np.ndarray]) -> np.ndarray:
        import torch

        if self._loaded is None:
            model, processor = _load(self.model_name, what="image")
            self._loaded = (model.to(self.device), processor)
        model, processor = self._loaded
        rows = []
        for start in range(0, len(images), self.batch_size):
            pixels = processor(
                images=[np.asarray(image) for image in images[start : start + self.batch_size]],
                return_tensors="pt",
                input_data_format="channels_last",
            )["pixel_values"].to(self.device)
            with torch.inference_mode():
                hidden = model(pixel_values=pixels).last_hidden_state
            rows.append(hidden[:, 0].float().cpu().numpy())
        return normalized(np.concatenate(rows))

    def video(self, video: Video) -> np.ndarray:
        """ê(I) of a clip: the normalised mean of its normalised frame embeddings."""
        if video.key not in self._videos:
            self._videos[video.key] = video_embedding(self.images(list(np.asarray(video.load()))))
        return self._videos[video.key]


class TextEncoder:
    """A GTE-style sentence encoder: masked mean of the last hidden states, L2-normalised."""

    def __init__(self, model: str, *, device: str = "cpu", batch_size: int = 64) -> None:
        self.model_name, self.device, self.batch_size = model, device, batch_size
        self._loaded: tuple[Any, Any] | None = None
        self._cache: dict[str, np.ndarray] = {}

    def texts(self, texts: Sequence[str]) -> np.ndarray:
        import torch

        todo = list(dict.fromkeys(text for text in texts if text not in self._cache))
        if todo:
            if self._loaded is None:
                model, tokenizer = _load(self.model_name, what="text")
                self._loaded = (model.to(self.device), tokenizer)
            model, tokenizer = self._loaded
            for start in range(0, len(todo), self.batch_size):
                batch = todo[start : start + self.batch_size]
                encoded = tokenizer(
                    batch, padding=True, truncation=True, max_length=512, return_tensors="pt"
                ).to(self.device)
                with torch.inference_mode():
                    hidden = model(**encoded).last_hidden_state.float()
                mask = encoded["attention_mask"].unsqueeze(-1).float()
                pooled = ((hidden * mask).sum(dim=1) / mask.sum(dim=1)).cpu().numpy()
                for text, row in zip(batch, normalized(pooled), strict=True):
                    self._cache[text] = row
        return np.stack([self._cache[text] for text in texts])


def diffusers_generator(model: str, *, device: str = "cpu", steps: int = 28) -> ImageGenerator:
    """A Stable Diffusion 3 pipeline (diffusers) loaded offline; generation g uses seed g."""
    pipeline: list[Any] = []

    def generate(caption: str, count: int) -> list[np.ndarray]:
        if not pipeline:
            try:
                import torch
                from diffusers import DiffusionPipeline
            except ImportError as error:
                raise MetricUnavailable(
                    "the text-to-image generator needs the diffusers package, which is not "
                    "installed"
                ) from error
            loaded = _offline(
                model, lambda: DiffusionPipeline.from_pretrained(model, local_files_only=True)
            )
            pipeline.append((loaded.to(device), torch))
        loaded, torch = pipeline[0]
        images = []
        for seed in range(count):
            generator = torch.Generator(device=device).manual_seed(seed)
            image = loaded(caption, num_inference_steps=steps, generator=generator).images[0]
            images.append(np.asarray(image.convert("RGB")))
        return images

    return generate


# ------------------------------------------------------------------------------------------------
# Plug-in


@dataclass
class RedemptionScore:
    """Redemption Score on items with references and a video (or one-frame image)."""

    clip: ClipEncoder
    dino: ImageEncoder
    gte: TextEncoder
    generator: ImageGenerator
    weights: tuple[float, float, float, float] = PUBLISHED_WEIGHTS
    generations: int = DEFAULT_GENERATIONS
    mid_eps: float = DEFAULT_MID_EPS
    name: str = "redemption"
    label: str = ""
    needs_references: bool = True
    needs_video: bool = True
    _generated: dict[str, np.ndarray] = field(default_factory=dict, init=False)

    def __post_init__(self) -> None:
        self.label = self.label or LABELS.get(self.name, self.name)
        check_weights(self.weights)

    def score(self, items: Sequence[MetricItem]) -> list[float]:
        if not items:
            return []
        alpha, beta, gamma, interpolation = self.weights
        fused = fuse(squash(self.signals(items)), alpha, beta, gamma, interpolation)
        return [float(value) for value in fused]

    def signals(self, items: Sequence[MetricItem]) -> np.ndarray:
        """The raw (MID PMI, DINO, GTE) of every item, (N, 3), before Eq. 7."""
        videos = [_video(item) for item in items]
        clip_images = np.stack([video_embedding(self.clip.frames(video)) for video in videos])
        clip_texts = np.stack(
            [embedding.caption for embedding in self.clip.texts([i.candidate for i in items])]
        )
        try:
            mid = gaussian_pmi(clip_images, normalized(clip_texts), eps=self.mid_eps)
        except ValueError as error:
            # The Gaussians are estimated from the scored set itself: too small a set cannot run.
            raise MetricUnavailable(f"MID on {len(items)} candidates: {error}") from error
        dino = np.array(
            [
                dino_similarity(
                    self.dino.video(video),
                    self._generated_embeddings(item.candidate),
                    self._generated_embeddings(item.references[0]),
                )
                for item, video in zip(items, videos, strict=True)
            ]
        )
        candidates = self.gte.texts([item.candidate for item in items])
        gte = np.array(
            [
                float(np.max(self.gte.texts(list(item.references)) @ candidate))
                for item, candidate in zip(items, candidates, strict=True)
            ]
        )
        return np.stack([mid, dino, gte], axis=1)

    def _generated_embeddings(self, caption: str) -> np.ndarray:
        if caption not in self._generated:
            images = self.generator(caption, self.generations)
            if len(images) != self.generations:
                raise ValueError(f"the generator drew {len(images)} images, not {self.generations}")
            self._generated[caption] = self.dino.images(images)
        return self._generated[caption]


def check_weights(weights: Sequence[float], minimum: float = MINIMUM_WEIGHT) -> None:
    """(α, β, γ, λ) must satisfy §3.4's constraints."""
    if len(weights) != 4:
        raise ValueError("Redemption Score weights are four numbers: alpha, beta, gamma, lambda")
    alpha, beta, gamma, interpolation = (float(value) for value in weights)
    if not math.isclose(alpha + beta + gamma, 1.0, abs_tol=1e-9):
        raise ValueError(f"alpha + beta + gamma must be 1, not {alpha + beta + gamma}")
    if min(alpha, beta, gamma) < minimum - 1e-12:
        raise ValueError(f"alpha, beta and gamma must each be at least {minimum}")
    if not 0 <= interpolation <= 1:
        raise ValueError("lambda must be between 0 and 1")


def parse_weights(text: str) -> tuple[float, float, float, float]:
    """ "a,b,g,l" -> the four weights, checked."""
    try:
        values = tuple(float(part) for part in text.split(","))
    except ValueError:
        raise ValueError(f"redemption_weights must be four numbers a,b,g,l, not {text!r}") from None
    check_weights(values)
    return values  # type: ignore[return-value]


def _video(item: MetricItem) -> Video:
    if item.video is None:
        raise ValueError("Redemption Score needs the image or video of every item")
    return item.video
