"""A release's statistics: the words of its captions (counted in Arrow while the Parquet files are
written), Krippendorff's alpha accumulated exactly from count tables, and the statistics block
that the card shows and manifest.json carries."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from annotation.quality.krippendorff import CoincidenceSum, alpha_from_coincidence
from export.records import WORD_SPLIT_PATTERN

if TYPE_CHECKING:  # the reads import this module's alpha accumulation
    from export.reads.sql_selection import Selection

RATING_VALUES = (1, 2, 3, 4, 5)
# Overall-score histogram bins of the card: [1.0, 1.5), [1.5, 2.0), ..., [4.5, 5.0].
SCORE_BINS = tuple(f"{1 + step / 2:.1f}–{1.5 + step / 2:.1f}" for step in range(8))


class WordCounter:
    """Words of the candidates and of the references (each clip's references counted once),
    counted in Arrow from the record batches: no Python loop per caption."""

    def __init__(self) -> None:
        self.candidate_words = 0
        self.candidate_vocabulary: set[str] = set()
        self.references = 0
        self.reference_words = 0
        self.reference_vocabulary: set[str] = set()
        self._last_clip: str | None = None

    @staticmethod
    def _words(texts: pa.Array) -> tuple[int, set[str]]:
        """(number of words, distinct words) of the texts."""
        tokens = pc.list_flatten(
            pc.split_pattern_regex(pc.utf8_lower(texts), pattern=WORD_SPLIT_PATTERN)
        )
        # Leading and trailing separators leave empty tokens: not words.
        lengths = pc.binary_length(tokens).to_numpy(zero_copy_only=False)
        distinct = set(pc.unique(tokens).to_pylist())
        distinct.discard("")
        return int(np.count_nonzero(lengths)), distinct

    def add(self, table: pa.Table) -> None:
        if table.num_rows == 0:
            return
        count, distinct = self._words(table.column("text").combine_chunks())
        self.candidate_words += count
        self.candidate_vocabulary |= distinct
        # Rows are grouped by clip: the first row of each clip carries its references.
        clips = table.column("clip_id").combine_chunks()
        previous = pa.concat_arrays(
            [pa.array([self._last_clip], type=pa.string()), clips.slice(0, len(clips) - 1)]
        )
        first_of_clip = pc.fill_null(pc.not_equal(clips, previous), True)
        references = pc.list_flatten(
            table.column("references").combine_chunks().filter(first_of_clip)
        )
        self.references += len(references)
        count, distinct = self._words(references)
        self.reference_words += count
        self.reference_vocabulary |= distinct
        self._last_clip = clips[-1].as_py()


def release_statistics(
    *,
    split_names: list[str],
    split_facts: dict[str, Any],
    words: WordCounter,
    judgments: dict[str, Any],
    agreement: dict[str, dict[str, Any]],
    selection: Selection,
) -> dict[str, Any]:
    """The statistics of the card and of manifest.json "statistics", from the reads' facts and
    the words counted while the files were written."""

    def ratio(numerator: float, denominator: int) -> float | None:
        return numerator / denominator if denominator else None

    splits = split_facts["splits"]
    candidates = sum(entry["candidates"] for entry in splits.values())
    clips = split_facts["clips"]
    images = split_facts.get("images", 0)
    return {
        # Every visual input (video clips and still images), then the two kinds.
        "clips": clips,
        "video_clips": clips - images,
        "images": images,
        "candidates": candidates,
        "candidates_per_clip": {
            "min": split_facts["per_clip_min"],
            "max": split_facts["per_clip_max"],
            "mean": ratio(candidates, clips),
        },
        "candidate_words": {
            "vocabulary": len(words.candidate_vocabulary),
            "total": words.candidate_words,
            "mean_length": ratio(words.candidate_words, candidates),
        },
        "references": words.references,
        "reference_words": {
            "vocabulary": len(words.reference_vocabulary),
            "total": words.reference_words,
            "mean_length": ratio(words.reference_words, words.references),
        },
        "vocabulary_all_captions": len(words.candidate_vocabulary | words.reference_vocabulary),
        "judgments": judgments["judgments"],
        "judgments_per_candidate": {
            "min": judgments["judgments_per_candidate_min"],
            "max": judgments["judgments_per_candidate_max"],
            "mean": ratio(judgments["judgments"], candidates),
        },
        "annotators": judgments["annotators"],
        "imported_rater_slots": judgments["imported_rater_slots"],
        "agreement": agreement,
        "splits": {
            name: {
                "candidates": splits[index]["candidates"],
                "clips": splits[index]["clips"],
                "mean_overall": splits[index]["mean_overall"],
                "overall_histogram": dict(zip(SCORE_BINS, splits[index]["bins"], strict=True)),
                "class_histogram": {
                    str(value): splits[index]["classes"][value - 1] for value in range(1, 6)
                },
            }
            for index, name in enumerate(split_names)
        },
        "excluded": selection["excluded"],
        "candidates_in_campaigns": selection["candidates_in_campaigns"],
    }


def accumulate_coincidence(
    tables: Iterable[np.ndarray], *, question_keys: Sequence[str]
) -> dict[str, dict[str, Any]]:
    """Alpha per question from batches of (items × questions × 5) count tables, accumulated as
    exact integer sums per number of ratings m: independent of batching and order."""
    sums = [CoincidenceSum(len(RATING_VALUES)) for _ in question_keys]
    items = [0] * len(question_keys)
    ratings = [0] * len(question_keys)
    for table in tables:
        for index, total in enumerate(sums):
            counts_table = table[:, index, :]
            per_item = counts_table.sum(axis=1)
            ratings[index] += int(per_item.sum())
            items[index] += int((per_item >= 2).sum())
            total.add(counts_table)
    result: dict[str, dict[str, Any]] = {}
    for index, key in enumerate(question_keys):
        coincidence = sums[index].matrix()
        alpha = alpha_from_coincidence(
            coincidence, level="ordinal", values=[float(value) for value in RATING_VALUES]
        )
        result[key] = {"alpha": alpha, "items": items[index], "ratings": ratings[index]}
    return result
