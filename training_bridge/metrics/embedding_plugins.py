"""The registry entries of the embedding-based plug-ins of issue 30 — PAC-S / RefPAC-S and PAC-S++,
FactVC, Polos, Redemption Score — kept apart from `plugins.py`, which only lists them.

Settings (all optional; a metric whose weights are not given or not found is listed unavailable
with the reason; nothing is downloaded):

| key | meaning |
|---|---|
| `pacs_model` [`LEPUS_PACS_MODEL`] | the PAC-S CLIP (a transformers checkpoint; the authors' `clip_ViT-B-32.pth` converted) |
| `pacs_plus_model` [`LEPUS_PACS_PLUS_MODEL`] | the PAC-S++ CLIP (LoRA merged), same format |
| `factvc_model` [`LEPUS_FACTVC_MODEL`] | the FactVC CLIP (`factvc_video.pth` converted), same format |
| `polos_model` [`LEPUS_POLOS_MODEL`] | a Polos directory: `polos.json` + `head.pt` (see polos.py) |
| `redemption_clip_model` | the CLIP of Redemption Score's MID (default: `clip_model`; the paper's is ViT-L/14) |
| `dino_model` [`LEPUS_DINO_MODEL`] | the DINO ViT (ViT-B/8 in the paper), transformers checkpoint |
| `gte_model` [`LEPUS_GTE_MODEL`] | the GTE text encoder (gte-large in the paper) |
| `t2i_model` [`LEPUS_T2I_MODEL`] | the text-to-image pipeline (Stable Diffusion 3 in the paper; needs diffusers) |
| `redemption_weights` | α,β,γ,λ (default 0.15,0.30,0.55,0.8, seed 002 l.368) |
| `redemption_generations` | images generated per caption (default 2) |
| `mid_eps` | ridge added to MID's covariances (default 5e-4) |
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from training_bridge.metrics.interface import LABELS

PACS_METRIC_NAMES = ("pacs", "refpacs", "pacs_plus", "refpacs_plus")
FACTVC_METRIC_NAMES = ("factvc", "factvc_ref")
POLOS_METRIC_NAMES = ("polos",)
REDEMPTION_METRIC_NAMES = ("redemption",)
EMBEDDING_METRIC_NAMES = (
    *PACS_METRIC_NAMES,
    *FACTVC_METRIC_NAMES,
    *POLOS_METRIC_NAMES,
    *REDEMPTION_METRIC_NAMES,
)
EMBEDDING_LABELS = {name: LABELS[name] for name in EMBEDDING_METRIC_NAMES}
EMBEDDING_SETTING_KEYS = (
    "pacs_model",
    "pacs_plus_model",
    "factvc_model",
    "polos_model",
    "redemption_clip_model",
    "dino_model",
    "gte_model",
    "t2i_model",
    "redemption_weights",
    "redemption_generations",
    "mid_eps",
)
ENVIRONMENT = {
    "pacs_model": "LEPUS_PACS_MODEL",
    "pacs_plus_model": "LEPUS_PACS_PLUS_MODEL",
    "factvc_model": "LEPUS_FACTVC_MODEL",
    "polos_model": "LEPUS_POLOS_MODEL",
    "dino_model": "LEPUS_DINO_MODEL",
    "gte_model": "LEPUS_GTE_MODEL",
    "t2i_model": "LEPUS_T2I_MODEL",
}


def _setting(raw: Mapping[str, Any], key: str) -> str | None:
    value = raw.get(key)
    if value is None and key in ENVIRONMENT:
        value = os.environ.get(ENVIRONMENT[key])
    text = None if value is None else str(value).strip()
    return text or None


def check_embedding_settings(raw: Mapping[str, Any]) -> None:
    """Raise ValueError on a bad value of these plug-ins' settings."""
    from training_bridge.metrics.redemption import parse_weights

    weights = _setting(raw, "redemption_weights")
    if weights is not None:
        parse_weights(weights)
    generations = _setting(raw, "redemption_generations")
    if generations is not None and (not generations.isdigit() or int(generations) < 1):
        raise ValueError(f"redemption_generations must be a whole number >= 1, not {generations!r}")
    eps = _setting(raw, "mid_eps")
    if eps is not None:
        try:
            if float(eps) < 0:
                raise ValueError
        except ValueError:
            raise ValueError(f"mid_eps must be a number >= 0, not {eps!r}") from None


def build_embedding_metric(
    name: str,
    raw: Mapping[str, Any],
    *,
    clip_model: str | None,
    device: str,
    batch_size: int,
    emscore_idf: bool,
    emscore_idf_corpus: str | None,
    encoder: Callable[[str], Any],
    unavailable: Callable[[str | None, str], str | None],
    generator: Callable[[str, int], list[Any]] | None = None,
) -> tuple[Any | None, str | None]:
    """(the plug-in, None) or (None, why it cannot run here); loads no weights. `encoder(model)`
    is the registry's shared `ClipEncoder` per checkpoint; `unavailable(model, setting)` its
    offline weights check (`plugins.weights_unavailable_reason`). `generator` replaces the
    diffusers pipeline of Redemption Score (tests hand in a stand-in)."""
    if name in PACS_METRIC_NAMES:
        from training_bridge.metrics.pacs import pac_score

        setting = "pacs_plus_model" if name.endswith("_plus") else "pacs_model"
        model = _setting(raw, setting)
        reason = unavailable(model, setting)
        if reason is not None:
            return None, reason
        assert model is not None
        return pac_score(name, encoder(model), with_references=name.startswith("ref")), None
    if name in FACTVC_METRIC_NAMES:
        from training_bridge.metrics.factvc import FactVC

        model = _setting(raw, "factvc_model")
        reason = unavailable(model, "factvc_model")
        if reason is not None:
            return None, reason
        assert model is not None
        metric = FactVC(
            name,
            encoder(model),
            with_references=name == "factvc_ref",
            idf=emscore_idf,
            idf_corpus=emscore_idf_corpus,
        )
        return metric, None
    if name in POLOS_METRIC_NAMES:
        from training_bridge.metrics.polos import Polos, polos_unavailable_reason

        model = _setting(raw, "polos_model")
        reason = polos_unavailable_reason(model)
        if reason is not None:
            return None, reason
        assert model is not None
        return Polos(str(Path(model).expanduser()), device=device), None
    if name in REDEMPTION_METRIC_NAMES:
        return _redemption(raw, clip_model, device, batch_size, encoder, unavailable, generator)
    raise ValueError(f"not an embedding plug-in: {name}")


def _redemption(
    raw: Mapping[str, Any],
    clip_model: str | None,
    device: str,
    batch_size: int,
    encoder: Callable[[str], Any],
    unavailable: Callable[[str | None, str], str | None],
    generator: Callable[[str, int], list[Any]] | None,
) -> tuple[Any | None, str | None]:
    from training_bridge.metrics.redemption import (
        DEFAULT_GENERATIONS,
        DEFAULT_MID_EPS,
        PUBLISHED_WEIGHTS,
        ImageEncoder,
        RedemptionScore,
        TextEncoder,
        diffusers_generator,
        parse_weights,
    )

    models = {
        "redemption_clip_model": _setting(raw, "redemption_clip_model") or clip_model,
        "dino_model": _setting(raw, "dino_model"),
        "gte_model": _setting(raw, "gte_model"),
    }
    reasons = [unavailable(model, setting) for setting, model in models.items()]
    if generator is None:
        t2i = _setting(raw, "t2i_model")
        if not t2i:
            reasons.append("no text-to-image generator given: set t2i_model=PATH")
        else:
            try:
                import diffusers  # noqa: F401
            except ImportError:
                reasons.append("t2i_model needs the diffusers package, which is not installed here")
            else:
                path = Path(t2i).expanduser()
                if not (path / "model_index.json").is_file():
                    reasons.append(
                        f"t2i_model={t2i}: no model_index.json there (a diffusers pipeline)"
                    )
                else:
                    generator = diffusers_generator(str(path), device=device)
    found = [reason for reason in reasons if reason]
    if found:
        return None, "; ".join(found)
    assert generator is not None
    weights = _setting(raw, "redemption_weights")
    generations = _setting(raw, "redemption_generations")
    eps = _setting(raw, "mid_eps")
    metric = RedemptionScore(
        clip=encoder(str(models["redemption_clip_model"])),
        dino=ImageEncoder(str(models["dino_model"]), device=device, batch_size=batch_size),
        gte=TextEncoder(str(models["gte_model"]), device=device, batch_size=batch_size),
        generator=generator,
        weights=parse_weights(weights) if weights else PUBLISHED_WEIGHTS,
        generations=int(generations) if generations else DEFAULT_GENERATIONS,
        mid_eps=float(eps) if eps is not None else DEFAULT_MID_EPS,
    )
    return metric, None
