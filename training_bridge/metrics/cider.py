"""CIDEr-D (Vedantam et al., 2015) as the COCO caption evaluation toolkit computes it.

For every scored item (a candidate with its references) and n = 1..4:

- each n-gram g of a sentence gets the weight tf(g) * (log(N) - log(max(1, df(g)))), where N is the
  number of scored items and df(g) the number of items whose reference set contains g — the IDF
  comes from the references of the evaluated corpus itself;
- sim_n(c, r) = sum_g min(w_c(g), w_r(g)) * w_r(g) / (|w_c| |w_r|)  (the "clipping" of CIDEr-D),
  times the Gaussian length penalty exp(-(l_c - l_r)^2 / (2 sigma^2)) with sigma = 6;
- CIDEr-D(c) = 10 * mean_n ( mean_r sim_n(c, r) ).

Quirks kept from the toolkit so that scores agree with it: the lengths in the penalty are counts of
*bigrams* (|tokens| - 1, or 0 for an empty caption), and an n-gram absent from all references gets
df = 1 (log 1 = 0, i.e. the full IDF log N).

Because the IDF depends on the corpus, CIDEr of a candidate changes with the set it is scored in;
`cider_scores` takes the whole corpus at once.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from training_bridge.metrics.bleu import ngram_counts

SIGMA = 6.0
MAX_ORDER = 4


@dataclass(frozen=True)
class _Vector:
    # (n-gram, order index, tf-idf weight) in the toolkit's insertion order, so sums run in its order.
    items: tuple[tuple[tuple[str, ...], int, float], ...]
    weights: dict[tuple[str, ...], float]
    norms: tuple[float, ...]
    length: int


def _vector(
    counts: Counter[tuple[str, ...]],
    document_frequency: dict[tuple[str, ...], int],
    log_items: float,
    max_order: int,
) -> _Vector:
    items = []
    squares = [0.0] * max_order
    bigrams = 0
    for ngram, term_frequency in counts.items():
        order = len(ngram) - 1
        frequency = document_frequency.get(ngram, 0)
        weight = float(term_frequency) * (log_items - math.log(max(1.0, float(frequency))))
        items.append((ngram, order, weight))
        squares[order] += weight * weight
        if order == 1:
            bigrams += term_frequency
    return _Vector(
        items=tuple(items),
        weights={ngram: weight for ngram, _, weight in items},
        norms=tuple(math.sqrt(square) for square in squares),
        length=bigrams,
    )


def _add_similarity(
    total: list[float], candidate: _Vector, reference: _Vector, sigma: float
) -> None:
    """Add sim_n(candidate, reference) for every order n to `total`."""
    delta = float(candidate.length - reference.length)
    penalty = math.e ** (-(delta**2) / (2 * sigma**2))
    values = [0.0] * len(total)
    reference_weights = reference.weights
    for ngram, order, weight in candidate.items:
        reference_weight = reference_weights.get(ngram)
        if reference_weight:
            values[order] += min(weight, reference_weight) * reference_weight
    for order, value in enumerate(values):
        candidate_norm = candidate.norms[order]
        reference_norm = reference.norms[order]
        if candidate_norm != 0 and reference_norm != 0:
            value /= candidate_norm * reference_norm
        total[order] += value * penalty


def cider_scores(
    candidates: Sequence[str],
    references: Sequence[Sequence[str]],
    *,
    sigma: float = SIGMA,
    max_order: int = MAX_ORDER,
) -> np.ndarray:
    """Per-candidate CIDEr-D of tokenised candidates; the corpus CIDEr-D is their mean.

    Each candidate is one scored item: the document frequencies count its reference set once.
    """
    if len(candidates) != len(references):
        raise ValueError("one list of references per candidate is needed")
    if not candidates:
        return np.zeros(0, dtype=np.float64)
    reference_counts_cache: dict[str, Counter[tuple[str, ...]]] = {}

    def counts_of(sentence: str) -> Counter[tuple[str, ...]]:
        counts = reference_counts_cache.get(sentence)
        if counts is None:
            counts = reference_counts_cache[sentence] = ngram_counts(sentence.split(), max_order)
        return counts

    reference_sets = []
    document_frequency: Counter[tuple[str, ...]] = Counter()
    set_cache: dict[tuple[str, ...], frozenset[tuple[str, ...]]] = {}
    for index, candidate_references in enumerate(references):
        if not candidate_references:
            raise ValueError(f"candidate {index} has no reference")
        key = tuple(candidate_references)
        ngrams = set_cache.get(key)
        if ngrams is None:
            ngrams = set_cache[key] = frozenset(
                ngram for reference in key for ngram in counts_of(reference)
            )
        document_frequency.update(ngrams)
        reference_sets.append(key)

    log_items = math.log(float(len(candidates)))
    frequency = dict(document_frequency)
    vector_cache: dict[str, _Vector] = {}

    def vector_of(sentence: str) -> _Vector:
        vector = vector_cache.get(sentence)
        if vector is None:
            vector = vector_cache[sentence] = _vector(
                counts_of(sentence), frequency, log_items, max_order
            )
        return vector

    scores = np.zeros(len(candidates), dtype=np.float64)
    for index, (candidate, candidate_references) in enumerate(
        zip(candidates, reference_sets, strict=True)
    ):
        candidate_vector = _vector(
            ngram_counts(candidate.split(), max_order), frequency, log_items, max_order
        )
        total = [0.0] * max_order
        for reference in candidate_references:
            _add_similarity(total, candidate_vector, vector_of(reference), sigma)
        scores[index] = float(np.mean(total)) / len(candidate_references) * 10.0
    return scores
