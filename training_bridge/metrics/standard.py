"""One entry point for the standard caption metrics: per-candidate BLEU-n, ROUGE-L, METEOR, CIDEr-D.

    scores = standard_metric_scores(candidates, references)
    scores["cider"][i]  # CIDEr-D of candidates[i] against references[i]

Captions are tokenised the COCO toolkit's way first (`tokenizer.coco_tokenize`). CIDEr-D's IDF comes
from the references of the candidates passed in, so score a whole evaluation set in one call.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable, Sequence
from typing import Any, ClassVar

import numpy as np

from training_bridge.metrics.bleu import Smoothing, bleu_scores
from training_bridge.metrics.cider import cider_scores
from training_bridge.metrics.meteor import (
    MeteorScorer,
    MeteorUnavailable,
    meteor_unavailable_reason,
)
from training_bridge.metrics.rouge import rouge_l_scores
from training_bridge.metrics.tokenizer import coco_tokenize

METRIC_NAMES = ("bleu1", "bleu2", "bleu3", "bleu4", "rougeL", "meteor", "cider")
DEFAULT_METRICS = ("bleu1", "bleu4", "rougeL", "meteor", "cider")


class MetricUnavailable(RuntimeError):
    """A requested metric cannot be computed here (e.g. METEOR without Java)."""


def load_offline(
    what: str, model: str, *, device: str, processor: str, model_class: str
) -> tuple[Any, Any]:
    """(processor or tokenizer, model) of a local checkpoint, named as transformers' classes
    `processor` and `model_class`, loaded without the network and put in eval mode on `device`; a
    checkpoint that will not load makes the metric unavailable ("the <what> model ... would not
    load: ...")."""
    try:
        import transformers

        loaded_processor = getattr(transformers, processor).from_pretrained(
            model, local_files_only=True
        )
        loaded: Any = getattr(transformers, model_class).from_pretrained(
            model, local_files_only=True
        )
    except Exception as error:  # any loader failure makes it unavailable
        raise MetricUnavailable(f"the {what} model {model} would not load: {error}") from error
    loaded.to(device).eval()
    return loaded_processor, loaded


class OfflineModel:
    """A local checkpoint loaded on first use by `load_offline`: a subclass names what it is for
    (`what`, in the unavailable message) and its transformers classes."""

    what: ClassVar[str]
    processor: ClassVar[str]
    model_class: ClassVar[str]

    def __init__(self, model: str, *, device: str = "cpu") -> None:
        self.model_name = model
        self.device = device
        self._loaded: tuple[Any, Any] | None = None

    def _load(self) -> tuple[Any, Any]:
        if self._loaded is None:
            self._loaded = load_offline(
                self.what,
                self.model_name,
                device=self.device,
                processor=self.processor,
                model_class=self.model_class,
            )
        return self._loaded


def metric_unavailable_reasons(
    metrics: Iterable[str] = DEFAULT_METRICS, *, meteor_jar: str | os.PathLike[str] | None = None
) -> dict[str, str]:
    """{metric: why it cannot run here} for the requested metrics that cannot run; {} when all can."""
    reasons = {}
    for metric in metrics:
        if metric not in METRIC_NAMES:
            raise ValueError(f"unknown metric {metric!r}; known: {', '.join(METRIC_NAMES)}")
        if metric == "meteor":
            reason = meteor_unavailable_reason(meteor_jar)
            if reason is not None:
                reasons[metric] = reason
    return reasons


def tokenize_corpus(
    candidates: Sequence[str], references: Sequence[Sequence[str]]
) -> tuple[list[str], list[list[str]]]:
    """COCO-tokenised copies of candidates and references; each distinct text is tokenised once."""
    cache: dict[str, str] = {}

    def tokenized(text: str) -> str:
        result = cache.get(text)
        if result is None:
            result = cache[text] = coco_tokenize(text)
        return result

    return (
        [tokenized(candidate) for candidate in candidates],
        [[tokenized(reference) for reference in group] for group in references],
    )


def standard_metric_scores(
    candidates: Sequence[str],
    references: Sequence[Sequence[str]],
    *,
    metrics: Sequence[str] = DEFAULT_METRICS,
    skip_unavailable: bool = False,
    bleu_smoothing: Smoothing = "coco",
    meteor_jar: str | os.PathLike[str] | None = None,
    meteor_scorer: MeteorScorer | None = None,
    progress: Callable[[str], None] | None = None,
) -> dict[str, np.ndarray]:
    """Per-candidate scores {metric: array of len(candidates)} of the requested metrics.

    `references[i]` is the list of reference captions of `candidates[i]` (at least one).
    A metric whose runtime is missing (METEOR without Java or its jar) raises `MetricUnavailable`,
    or, with `skip_unavailable=True`, is left out of the result (ask `metric_unavailable_reasons`
    why). Sentence BLEU uses `bleu_smoothing` ("coco" by default; see `bleu.py`). `progress`, if
    given, is called with the name of each step before it runs.
    """

    def step(name: str) -> None:
        if progress is not None:
            progress(name)

    if len(candidates) != len(references):
        raise ValueError("one list of references per candidate is needed")
    requested = list(dict.fromkeys(metrics))
    # A running scorer handed in by the caller needs no runtime check.
    to_check = [m for m in requested if not (m == "meteor" and meteor_scorer is not None)]
    reasons = metric_unavailable_reasons(to_check, meteor_jar=meteor_jar)
    if reasons and not skip_unavailable:
        raise MetricUnavailable("; ".join(f"{name}: {why}" for name, why in reasons.items()))
    requested = [metric for metric in requested if metric not in reasons]
    for index, group in enumerate(references):
        if not group:
            raise ValueError(f"candidate {index} has no reference")

    step("tokenize")
    tokenized_candidates, tokenized_references = tokenize_corpus(candidates, references)
    scores: dict[str, np.ndarray] = {}
    bleu_orders = [int(metric[-1]) for metric in requested if metric.startswith("bleu")]
    if bleu_orders:
        step("bleu")
        bleu = bleu_scores(
            tokenized_candidates,
            tokenized_references,
            max_order=max(bleu_orders),
            smoothing=bleu_smoothing,
        )
        for order in bleu_orders:
            scores[f"bleu{order}"] = bleu.sentence[:, order - 1].copy()
    if "rougeL" in requested:
        step("rougeL")
        scores["rougeL"] = rouge_l_scores(tokenized_candidates, tokenized_references)
    if "cider" in requested:
        step("cider")
        scores["cider"] = cider_scores(tokenized_candidates, tokenized_references)
    if "meteor" in requested:
        step("meteor")
        if meteor_scorer is not None:
            scores["meteor"] = meteor_scorer.scores(tokenized_candidates, tokenized_references)
        else:
            try:
                with MeteorScorer(meteor_jar) as scorer:
                    scores["meteor"] = scorer.scores(tokenized_candidates, tokenized_references)
            except MeteorUnavailable as error:  # the runtime vanished between check and start
                if not skip_unavailable:
                    raise MetricUnavailable(f"meteor: {error}") from error
    return {metric: scores[metric] for metric in requested if metric in scores}
