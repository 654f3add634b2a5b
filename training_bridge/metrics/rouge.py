"""ROUGE-L (Lin, 2004) with multiple references, as the COCO caption evaluation toolkit computes it.

For a tokenised candidate c and references r_1..r_k:

    P = max_j LCS(c, r_j) / |c|        R = max_j LCS(c, r_j) / |r_j|
    ROUGE-L = (1 + beta^2) P R / (R + beta^2 P)   with beta = 1.2, or 0 when P or R is 0.

Note that P and R are maximised *separately* over the references (the toolkit's definition), not
the F-score of the single best reference. Tokens are split on single spaces, so an empty caption
counts as one empty token, again as in the toolkit.

The longest common subsequence uses the bit-parallel algorithm of Allison & Dix / Hyyrö
(one big-integer update per candidate token), which keeps 162,000 candidate-reference pairs at
about a second in pure Python.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

BETA = 1.2


def lcs_length(first: Sequence[str], second: Sequence[str]) -> int:
    """Length of the longest common subsequence of two token sequences."""
    if len(first) < len(second):
        first, second = second, first
    if not second:
        return 0
    positions: dict[str, int] = {}
    for index, token in enumerate(second):
        positions[token] = positions.get(token, 0) | (1 << index)
    mask = (1 << len(second)) - 1
    row = mask
    for token in first:
        matched = row & positions.get(token, 0)
        row = ((row + matched) | (row - matched)) & mask
    return len(second) - row.bit_count()


def rouge_l_score(candidate: str, references: Sequence[str], *, beta: float = BETA) -> float:
    """ROUGE-L F of one tokenised candidate against its tokenised references."""
    if not references:
        raise ValueError("at least one reference is needed")
    candidate_tokens = candidate.split(" ")
    best_precision = 0.0
    best_recall = 0.0
    for reference in references:
        reference_tokens = reference.split(" ")
        common = lcs_length(reference_tokens, candidate_tokens)
        best_precision = max(best_precision, common / float(len(candidate_tokens)))
        best_recall = max(best_recall, common / float(len(reference_tokens)))
    if best_precision == 0 or best_recall == 0:
        return 0.0
    return ((1 + beta**2) * best_precision * best_recall) / float(
        best_recall + beta**2 * best_precision
    )


def rouge_l_scores(
    candidates: Sequence[str], references: Sequence[Sequence[str]], *, beta: float = BETA
) -> np.ndarray:
    """Per-candidate ROUGE-L; the corpus score of the toolkit is their mean."""
    if len(candidates) != len(references):
        raise ValueError("one list of references per candidate is needed")
    return np.array(
        [
            rouge_l_score(candidate, candidate_references, beta=beta)
            for candidate, candidate_references in zip(candidates, references, strict=True)
        ],
        dtype=np.float64,
    )
