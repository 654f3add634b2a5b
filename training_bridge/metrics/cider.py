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
from collections import Counter, defaultdict
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
    norms: tuple[float, ...]
    length: int


def _vector(
    counts: Counter[tuple[str, ...]],
    idf: dict[tuple[str, ...], float],
    log_items: float,
    max_order: int,
) -> _Vector:
    lookup = idf.get
    # An n-gram in no reference set has df = max(1, 0) = 1: the full IDF log(N).
    items = [
        (ngram, len(ngram) - 1, float(term_frequency) * lookup(ngram, log_items))
        for ngram, term_frequency in counts.items()
    ]
    squares = [0.0] * max_order
    for _, order, weight in items:
        squares[order] += weight * weight
    bigrams = sum(count for ngram, count in counts.items() if len(ngram) == 2)
    return _Vector(
        items=tuple(items),
        norms=tuple(math.sqrt(square) for square in squares),
        length=bigrams,
    )


@dataclass(frozen=True)
class _ReferenceGroup:
    """The references of one scored item, indexed by n-gram: n-gram -> [(reference, weight)].
    A candidate n-gram then visits only the references that contain it."""

    vectors: tuple[_Vector, ...]
    postings: dict[tuple[str, ...], list[tuple[int, float]]]


def _reference_group(vectors: Sequence[_Vector]) -> _ReferenceGroup:
    postings: defaultdict[tuple[str, ...], list[tuple[int, float]]] = defaultdict(list)
    for position, vector in enumerate(vectors):
        for ngram, _, weight in vector.items:
            postings[ngram].append((position, weight))
    return _ReferenceGroup(tuple(vectors), dict(postings))


def _item_score(candidate: _Vector, group: _ReferenceGroup, sigma: float, max_order: int) -> float:
    """CIDEr-D of one candidate against its reference group (x10, mean over orders and refs)."""
    overlaps = [[0.0] * max_order for _ in group.vectors]
    for ngram, order, weight in candidate.items:
        for position, reference_weight in group.postings.get(ngram, ()):
            if reference_weight:
                overlaps[position][order] += min(weight, reference_weight) * reference_weight
    total = [0.0] * max_order
    for reference, values in zip(group.vectors, overlaps, strict=True):
        delta = float(candidate.length - reference.length)
        penalty = math.e ** (-(delta**2) / (2 * sigma**2))
        for order, value in enumerate(values):
            candidate_norm = candidate.norms[order]
            reference_norm = reference.norms[order]
            if candidate_norm != 0 and reference_norm != 0:
                value /= candidate_norm * reference_norm
            total[order] += value * penalty
    return float(np.mean(total)) / len(group.vectors) * 10.0


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
    for index, candidate_references in enumerate(references):
        if not candidate_references:
            raise ValueError(f"candidate {index} has no reference")
        reference_sets.append(tuple(candidate_references))
    # df counts every scored item whose reference set holds the n-gram; items sharing a reference
    # set (the candidates of one clip) add their multiplicity at once.
    document_frequency: Counter[tuple[str, ...]] = Counter()
    for key, multiplicity in Counter(reference_sets).items():
        for ngram in {ngram for reference in key for ngram in counts_of(reference)}:
            document_frequency[ngram] += multiplicity

    log_items = math.log(float(len(candidates)))
    # log N - log max(1, df), computed once per distinct n-gram of the references.
    idf = {
        ngram: log_items - math.log(max(1.0, float(frequency)))
        for ngram, frequency in document_frequency.items()
    }
    vector_cache: dict[str, _Vector] = {}
    group_cache: dict[tuple[str, ...], _ReferenceGroup] = {}

    def vector_of(sentence: str) -> _Vector:
        vector = vector_cache.get(sentence)
        if vector is None:
            vector = vector_cache[sentence] = _vector(
                counts_of(sentence), idf, log_items, max_order
            )
        return vector

    scores = np.zeros(len(candidates), dtype=np.float64)
    for index, (candidate, key) in enumerate(zip(candidates, reference_sets, strict=True)):
        group = group_cache.get(key)
        if group is None:
            group = group_cache[key] = _reference_group([vector_of(text) for text in key])
        candidate_vector = _vector(
            ngram_counts(candidate.split(), max_order), idf, log_items, max_order
        )
        scores[index] = _item_score(candidate_vector, group, sigma, max_order)
    return scores
