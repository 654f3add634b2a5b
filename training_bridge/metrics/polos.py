"""Polos (Wada et al., "Polos: Multimodal Metric Learning from Human Feedback for Image
Captioning", CVPR 2024) as a `plugins.CaptionMetric`: a regressor on parallel SimCSE and CLIP
features, trained on human judgments (Polaris).

Source: keio-smilab24/Polos at 839d64d, `polos/models/estimators/polos_estimator.py`
(`PolosEstimator.forward`, `_build_model`) with `configs/polos-trainer.yaml`:

- text features (SimCSE, `pretrained_model: princeton-nlp/sup-simcse-roberta-base`, `layer: mix`,
  `pool: cls`): the [CLS] row of a scalar mix of every hidden state (embeddings included) —
  softmax(s)_k-weighted sum of the layer-normalised layers, times γ (`modules/scalar_mix.py`,
  `do_layer_norm=True`: mean and variance over the unmasked tokens, ε = 1e-12) — for the
  candidate c_s and each reference r_s;
- CLIP features (ViT-B/32, NOT normalised: `clip.encode_text` / `encode_image`): the image v, the
  candidate c_v and each reference r_v, texts prefixed "A photo depicts ";
- per reference r the feature vector
  x = [r_s, c_s, |c_s − r_s|, c_s ⊙ r_s, v, c_v, |v − c_v|, v ⊙ c_v, |r_v − c_v|, r_v ⊙ c_v];
- score = max over the references of sigmoid(FF(x)), FF = Linear → tanh → Linear → tanh →
  Linear(1) (`hidden_sizes: "2304,1152"`, `activations: Tanh`, `final_activation: False`, then the
  estimator's own `torch.nn.Sigmoid()`).

Weights (`polos_model`, a directory): `polos.json` naming the SimCSE checkpoint (`text_model`) and
the CLIP checkpoint (`clip_model`), both transformers checkpoints (paths relative to the directory
allowed), and `head.pt`: the regressor's tensors under the authors' names — `scalar_mix.gamma`,
`scalar_mix.scalar_parameters.{k}`, `ff.0.ff.linear_{i}.weight|bias` — so the `state_dict` of the
authors' checkpoint can be saved as it is (other keys are ignored).

Differences, on purpose: the scalar mix's layer normalisation is taken per sentence (the authors'
takes it over the whole padded batch, so a caption's score depends on its batch-mates); the
authors' `forward` zips reference positions with items (`zip(ref_sentemb_list, refs_clip)`), which
pairs a reference's SimCSE features with another item's CLIP reference features when a batch
holds more than one item; here each reference's SimCSE and CLIP features are its own.

Video: the raw CLIP image features of the sampled frames, averaged (Polos is an image metric;
this is EMScore-style frame averaging without the normalisation Polos never applies).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from training_bridge.metrics.interface import LABELS, MetricItem
from training_bridge.metrics.standard import MetricUnavailable

POLOS_PROMPT = "A photo depicts "
LAYER_NORM_EPS = 1e-12


def polos_unavailable_reason(model: str | None) -> str | None:
    if not model:
        return "no weights given: set polos_model=DIR (polos.json + head.pt, see docs/metrics.md)"
    directory = Path(model).expanduser()
    for name in ("polos.json", "head.pt"):
        if not (directory / name).is_file():
            return f"polos_model={model}: no {name} there"
    return None


# ------------------------------------------------------------------------------------------------
# Formulas (NumPy)


def scalar_mix_cls(layers: np.ndarray, scalars: np.ndarray, gamma: float) -> np.ndarray:
    """The [CLS] row of γ Σ_k softmax(s)_k LN(h_k) for one sentence's hidden states (K, T, d)."""
    hidden = np.asarray(layers, dtype=np.float64)
    weights = np.exp(scalars - np.max(scalars))
    weights = weights / weights.sum()
    mean = hidden.mean(axis=(1, 2), keepdims=True)
    variance = ((hidden - mean) ** 2).mean(axis=(1, 2), keepdims=True)
    normed = (hidden - mean) / np.sqrt(variance + LAYER_NORM_EPS)
    return np.asarray(gamma * np.tensordot(weights, normed, axes=1)[0])


def polos_features(
    candidate_text: np.ndarray,
    reference_text: np.ndarray,
    image: np.ndarray,
    candidate_clip: np.ndarray,
    reference_clip: np.ndarray,
) -> np.ndarray:
    c, r, v = candidate_text, reference_text, image
    cv, rv = candidate_clip, reference_clip
    return np.concatenate(
        [r, c, np.abs(c - r), c * r, v, cv, np.abs(v - cv), v * cv, np.abs(rv - cv), rv * cv]
    )


@dataclass(frozen=True)
class PolosHead:
    scalars: np.ndarray
    gamma: float
    layers: list[tuple[np.ndarray, np.ndarray]]  # (weight (out, in), bias) per Linear

    def regress(self, features: np.ndarray) -> np.ndarray:
        """sigmoid(FF(x)) row by row, tanh between the linear layers."""
        x = np.asarray(features, dtype=np.float64)
        for index, (weight, bias) in enumerate(self.layers):
            x = x @ weight.T + bias
            if index < len(self.layers) - 1:
                x = np.tanh(x)
        return np.asarray(1 / (1 + np.exp(-x[..., 0])))

    @classmethod
    def from_state_dict(cls, state: dict[str, Any]) -> PolosHead:
        def array(key: str) -> np.ndarray:
            value = state[key]
            return np.asarray(
                value.detach().double().cpu().numpy() if hasattr(value, "detach") else value,
                dtype=np.float64,
            )

        scalars: list[float] = []
        while f"scalar_mix.scalar_parameters.{len(scalars)}" in state:
            scalars.append(
                float(array(f"scalar_mix.scalar_parameters.{len(scalars)}").reshape(-1)[0])
            )
        layers: list[tuple[np.ndarray, np.ndarray]] = []
        while f"ff.0.ff.linear_{len(layers) + 1}.weight" in state:
            prefix = f"ff.0.ff.linear_{len(layers) + 1}"
            layers.append((array(f"{prefix}.weight"), array(f"{prefix}.bias")))
        if not scalars or not layers or "scalar_mix.gamma" not in state:
            raise MetricUnavailable(
                "head.pt lacks Polos's scalar_mix.* or ff.0.ff.linear_*.* tensors"
            )
        gamma = float(array("scalar_mix.gamma").reshape(-1)[0])
        return cls(np.array(scalars), gamma, layers)


# ------------------------------------------------------------------------------------------------
# Plug-in


@dataclass
class Polos:
    model: str
    device: str = "cpu"
    name: str = "polos"
    label: str = ""
    needs_references: bool = True
    needs_video: bool = True
    _loaded: dict[str, Any] = field(default_factory=dict, init=False)

    def __post_init__(self) -> None:
        self.label = self.label or LABELS.get(self.name, self.name)

    def _load(self) -> dict[str, Any]:
        if self._loaded:
            return self._loaded
        directory = Path(self.model).expanduser()
        try:
            import torch
            from transformers import (
                AutoImageProcessor,
                AutoModel,
                AutoTokenizer,
            )

            config = json.loads((directory / "polos.json").read_text(encoding="utf-8"))
            paths = {key: str(directory / config[key]) for key in ("text_model", "clip_model")}
            state = torch.load(directory / "head.pt", map_location="cpu", weights_only=True)
            state = state.get("state_dict", state)
            self._loaded = {
                "head": PolosHead.from_state_dict(state),
                "text": AutoModel.from_pretrained(paths["text_model"], local_files_only=True)
                .to(self.device)
                .eval(),
                "text_tokenizer": AutoTokenizer.from_pretrained(
                    paths["text_model"], local_files_only=True
                ),
                "clip": AutoModel.from_pretrained(paths["clip_model"], local_files_only=True)
                .to(self.device)
                .eval(),
                "clip_tokenizer": AutoTokenizer.from_pretrained(
                    paths["clip_model"], local_files_only=True
                ),
                "clip_processor": AutoImageProcessor.from_pretrained(
                    paths["clip_model"], local_files_only=True
                ),
            }
        except MetricUnavailable:
            raise
        except Exception as error:
            raise MetricUnavailable(
                f"could not load Polos from {self.model} offline: {type(error).__name__}: {error}"
            ) from error
        return self._loaded

    def text_features(self, text: str) -> np.ndarray:
        import torch

        loaded = self._load()
        encoded = loaded["text_tokenizer"]([text], truncation=True, return_tensors="pt").to(
            self.device
        )
        with torch.inference_mode():
            hidden = loaded["text"](**encoded, output_hidden_states=True).hidden_states
        layers = torch.stack(hidden)[:, 0].double().cpu().numpy()  # (K, T, d)
        head: PolosHead = loaded["head"]
        if len(layers) != len(head.scalars):
            raise MetricUnavailable(
                f"head.pt mixes {len(head.scalars)} layers, the text model has {len(layers)}"
            )
        return scalar_mix_cls(layers, head.scalars, head.gamma)

    def clip_text(self, text: str) -> np.ndarray:
        import torch

        loaded = self._load()
        encoded = loaded["clip_tokenizer"](
            [POLOS_PROMPT + text], truncation=True, max_length=77, return_tensors="pt"
        ).to(self.device)
        with torch.inference_mode():
            output = loaded["clip"].get_text_features(**encoded)
        output = getattr(output, "pooler_output", output)
        return np.asarray(output[0].double().cpu().numpy())

    def clip_image(self, frames: np.ndarray) -> np.ndarray:
        import torch

        loaded = self._load()
        pixels = loaded["clip_processor"](
            images=list(frames), return_tensors="pt", input_data_format="channels_last"
        )["pixel_values"].to(self.device)
        with torch.inference_mode():
            output = loaded["clip"].get_image_features(pixel_values=pixels)
        output = getattr(output, "pooler_output", output)
        return np.asarray(output.double().cpu().numpy().mean(axis=0))

    def score(self, items: Sequence[MetricItem]) -> list[float]:
        if not items:
            return []
        head: PolosHead = self._load()["head"]
        images: dict[str, np.ndarray] = {}
        scores = []
        for item in items:
            if item.video is None:
                raise ValueError("Polos needs the image or video of every item")
            if item.video.key not in images:
                images[item.video.key] = self.clip_image(np.asarray(item.video.load()))
            candidate_text = self.text_features(item.candidate)
            candidate_clip = self.clip_text(item.candidate)
            features = np.stack(
                [
                    polos_features(
                        candidate_text,
                        self.text_features(reference),
                        images[item.video.key],
                        candidate_clip,
                        self.clip_text(reference),
                    )
                    for reference in item.references
                ]
            )
            scores.append(float(np.max(head.regress(features))))
        return scores
