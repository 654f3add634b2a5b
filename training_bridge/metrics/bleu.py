"""BLEU-1..4 with multiple references (Papineni et al., 2002), corpus- and sentence-level.

Inputs are tokenised captions (tokens joined by single spaces, e.g. the output of
`tokenizer.coco_tokenize`). The definitions follow the COCO caption evaluation toolkit:

- modified n-gram precision: each candidate n-gram counts at most as often as it occurs in the one
  reference where it occurs most (clipping), summed over n-gram orders 1..N separately;
- brevity penalty exp(1 - r / c) when c < r, where c is the candidate length and r the length of the
  reference *closest* to c (the shorter one on a tie);
- corpus BLEU-n sums the clipped matches, the candidate n-gram counts, c and r over the whole corpus
  before taking the geometric mean of precisions 1..n and the brevity penalty;
- sentence BLEU-n applies the same formula to one candidate.

Sentence-level smoothing (`smoothing=`):

- "coco" (default; pycocoevalcap's per-image scores, which PAC-S's correlation script uses —
  aimagelab/pacscore, compute_correlations.py through evaluation/__init__.py; for the EMScore and
  Rigel tables no readable text says which smoothing they used, see docs/metrics.md): every
  precision is (matches + 1e-15) / (candidate n-grams + 1e-9), and the length ratio is
  (c + 1e-15) / (r + 1e-9). A candidate without a single 4-gram match therefore gets a BLEU-4 of
  about 1e-15^(1/4) * ... ≈ 1e-4 to 1e-6 instead of an undefined log(0): tiny but still *ordered* by
  its lower-order precisions, which matters for rank correlations.
- "add_one" (Lin and Och, 2004): precisions of order n >= 2 become (matches + 1) / (count + 1);
  unigram precision and the brevity penalty are unsmoothed.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

import numpy as np

_TINY = 1e-15
_SMALL = 1e-9

Smoothing = Literal["coco", "add_one"]


def ngram_counts(tokens: Sequence[str], max_order: int) -> Counter[tuple[str, ...]]:
    """Counts of every n-gram of `tokens` for n = 1..max_order (all orders in one counter)."""
    counts: Counter[tuple[str, ...]] = Counter()
    for order in range(1, max_order + 1):
        # zip of the shifted sequences yields the n-grams as tuples, left to right.
        counts.update(zip(*(tokens[start:] for start in range(order)), strict=False))
    return counts


@dataclass(frozen=True)
class _ReferenceStats:
    lengths: tuple[int, ...]
    max_counts: dict[tuple[str, ...], int]


@dataclass(frozen=True)
class BleuResult:
    """`corpus[n - 1]` is corpus BLEU-n; `sentence[i, n - 1]` is BLEU-n of candidate i."""

    corpus: tuple[float, ...]
    sentence: np.ndarray


def _reference_stats(references: Sequence[str], max_order: int) -> _ReferenceStats:
    lengths = []
    max_counts: dict[tuple[str, ...], int] = {}
    for reference in references:
        tokens = reference.split()
        lengths.append(len(tokens))
        for ngram, count in ngram_counts(tokens, max_order).items():
            if count > max_counts.get(ngram, 0):
                max_counts[ngram] = count
    return _ReferenceStats(tuple(lengths), max_counts)


def _closest_length(lengths: Sequence[int], candidate_length: int) -> int:
    return min(lengths, key=lambda length: (abs(length - candidate_length), length))


def bleu_scores(
    candidates: Sequence[str],
    references: Sequence[Sequence[str]],
    *,
    max_order: int = 4,
    smoothing: Smoothing = "coco",
) -> BleuResult:
    """Corpus and per-candidate BLEU-1..max_order of tokenised candidates against their references."""
    if len(candidates) != len(references):
        raise ValueError("one list of references per candidate is needed")
    if smoothing not in ("coco", "add_one"):
        raise ValueError(f"unknown smoothing {smoothing!r}")
    sentence = np.zeros((len(candidates), max_order), dtype=np.float64)
    total_matches = [0] * max_order
    total_guesses = [0] * max_order
    total_candidate_length = 0
    total_reference_length = 0
    # Candidates of one clip share their reference list: cook it once.
    cache: dict[tuple[str, ...], _ReferenceStats] = {}
    for index, (candidate, candidate_references) in enumerate(
        zip(candidates, references, strict=True)
    ):
        if not candidate_references:
            raise ValueError(f"candidate {index} has no reference")
        key = tuple(candidate_references)
        stats = cache.get(key)
        if stats is None:
            stats = cache[key] = _reference_stats(key, max_order)
        tokens = candidate.split()
        length = len(tokens)
        reference_length = _closest_length(stats.lengths, length)
        matches = [0] * max_order
        for ngram, count in ngram_counts(tokens, max_order).items():
            clipped = min(count, stats.max_counts.get(ngram, 0))
            if clipped:
                matches[len(ngram) - 1] += clipped
        guesses = [max(0, length - order) for order in range(max_order)]
        for order in range(max_order):
            total_matches[order] += matches[order]
            total_guesses[order] += guesses[order]
        total_candidate_length += length
        total_reference_length += reference_length
        sentence[index] = _sentence_bleu(matches, guesses, length, reference_length, smoothing)
    corpus = _coco_bleu(
        total_matches, total_guesses, total_candidate_length, total_reference_length
    )
    return BleuResult(corpus=tuple(corpus), sentence=sentence)


def _coco_bleu(
    matches: Sequence[int], guesses: Sequence[int], length: int, reference_length: int
) -> list[float]:
    # The same float operations, in the same order, as the COCO toolkit, so results agree to ~1e-16.
    values = []
    product = 1.0
    for order in range(len(matches)):
        product *= (float(matches[order]) + _TINY) / (float(guesses[order]) + _SMALL)
        values.append(product ** (1.0 / (order + 1)))
    ratio = (length + _TINY) / (reference_length + _SMALL)
    if ratio < 1:
        penalty = math.exp(1 - 1 / ratio)
        values = [value * penalty for value in values]
    return values


def _sentence_bleu(
    matches: Sequence[int],
    guesses: Sequence[int],
    length: int,
    reference_length: int,
    smoothing: Smoothing,
) -> list[float]:
    if smoothing == "coco":
        return _coco_bleu(matches, guesses, length, reference_length)
    if length == 0:
        return [0.0] * len(matches)
    values = []
    log_sum = 0.0
    for order in range(len(matches)):
        numerator = matches[order] + (1 if order > 0 else 0)
        denominator = guesses[order] + (1 if order > 0 else 0)
        if numerator == 0:
            values.extend([0.0] * (len(matches) - order))
            break
        log_sum += math.log(numerator / denominator)
        values.append(math.exp(log_sum / (order + 1)))
    penalty = 1.0 if length >= reference_length else math.exp(1 - reference_length / length)
    return [value * penalty for value in values]
