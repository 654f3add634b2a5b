"""Published correlations of the caption metrics, each with its place, for the Metrics
leaderboard's "published" column. Values ×100, as printed.

Sources:

- `RIGEL_T1`: the Rigel paper, seed 000 `/work/shared/seeds/000_c090a1d314290d2f.txt`, Table 1
  (lines 52-88; image benchmarks). The seed's copy lost the sub-column symbols; each benchmark has
  two columns, read here as (Kendall τ_b, τ_c): §5.1 (line 117) names τ_b and τ_c for these
  datasets, and EXPERT's row fits that order (its code, `expert.py` of `hjkim811/EXPERT`, reports
  τ_c except τ_b on Flickr8K-CF — its printed cells are Flickr8K-Expert's second, Flickr8K-CF's
  first). The paper's "BLEU" row is taken as BLEU-4 (not stated).
- `RIGEL_T2`: the same paper, Table 2 (lines 92-109; VATEX-EVAL, Kendall τ_b and Spearman ρ, 1-ref
  and 9-ref columns, line 123).
- `RECALLED`: the EMScore paper's VATEX-EVAL rows of the lexical metrics as entered in
  docs/metrics.md ("recalled, not verified") — no seed prints them.

Benchmarks without a saved table (the image ones until a converted benchmark is imported and saved)
still show their figures, with our column empty and how to fill it.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

RIGEL_T1 = "Rigel paper (seed 000), Table 1"
RIGEL_T2 = "Rigel paper (seed 000), Table 2"
RECALLED = "EMScore paper, recalled, unverified (docs/metrics.md)"

VATEX_EVAL = "VATEX-EVAL"
IMAGE_BENCHMARKS = ("Flickr8K-Expert", "Flickr8K-CF", "Nebula", "Composite")
# Campaign slugs whose judgments are a published benchmark's (`import_vatex_eval`).
BENCHMARK_OF_CAMPAIGN = {"vatex-eval": VATEX_EVAL}


@dataclass(frozen=True)
class PublishedFigure:
    metric: (
        str  # our registry name (a name not registered here still shows, as "not in this build")
    )
    label: str  # the row as printed
    benchmark: str
    setting: str  # "1-ref", "9-ref", "4-ref"... or "reference-free"
    values: tuple[tuple[str, float], ...]  # (statistic, value x100), as printed
    source: str
    place: str  # line of the seed file, or where the recalled figure is kept
    verified: bool  # read from a seed file (True) or recalled (False)
    note: str = ""

    def as_dict(self) -> dict[str, object]:
        # The fields in declaration order, `values` as a mapping.
        return {**asdict(self), "values": dict(self.values)}


def _t2(
    metric: str, label: str, setting: str, tau: float, rho: float | None, line: int, note: str = ""
) -> PublishedFigure:
    values = (("kendall_b", tau),) + ((("spearman", rho),) if rho is not None else ())
    return PublishedFigure(
        metric, label, VATEX_EVAL, setting, values, RIGEL_T2, f"line {line}", True, note
    )


# (τ_b, τ_c) per image benchmark, None where the paper prints no value.
_Cells = tuple[tuple[float | None, float | None], ...]


def _t1(
    metric: str,
    label: str,
    setting: str,
    line: int,
    cells: _Cells,
    note: str = "",
) -> list[PublishedFigure]:
    """One row of Table 1: a figure per benchmark of `IMAGE_BENCHMARKS` that prints a value."""
    figures = []
    for benchmark, (tau_b, tau_c) in zip(IMAGE_BENCHMARKS, cells, strict=True):
        values = tuple(
            (key, value)
            for key, value in (("kendall_b", tau_b), ("kendall_c", tau_c))
            if value is not None
        )
        if values:
            figures.append(
                PublishedFigure(
                    metric, label, benchmark, setting, values, RIGEL_T1, f"line {line}", True, note
                )
            )
    return figures


_GPT4O = (
    "GPT-4o with the authors' prompt; ours runs a local VLM with our rubric: not the same judge"
)
_LLAVA = "the authors' fine-tuned LLaVA-1.5-13B; ours runs whichever local VLM judge_model names"

_NOT_PRINTED = (None, None)
# Table 1 (image benchmarks): metric, the row as printed, setting, seed line, and (τ_b, τ_c) on
# Flickr8K-Expert, Flickr8K-CF, Nebula and Composite (the order of IMAGE_BENCHMARKS), then a note.
# fmt: off
_TABLE_1: tuple[tuple[str, str, str, int, _Cells, str], ...] = (
    ("bleu4", "BLEU", "references", 56,
     ((30.6, 30.8), (16.4, 8.7), (46.5, 44.1), (28.3, 30.6)), ""),
    ("rougeL", "ROUGE", "references", 57,
     ((32.1, 32.3), (19.9, 10.3), (45.8, 43.4), (30.0, 32.4)), ""),
    ("cider", "CIDEr", "references", 58,
     ((43.6, 43.9), (24.6, 12.7), (51.5, 48.8), (34.9, 37.7)), ""),
    ("meteor", "METEOR", "references", 59,
     ((41.5, 41.8), (22.2, 11.5), (50.2, 47.6), (36.0, 38.9)), ""),
    ("refclipscore", "RefCLIP-S", "references", 62,
     ((52.6, 53.0), (36.4, 18.8), (53.6, 50.8), (51.2, 55.4)), ""),
    ("gveval_judge", "G-VEval", "references", 72,
     ((60.5, 58.7), (38.2, 19.9), _NOT_PRINTED, _NOT_PRINTED), _GPT4O),
    ("clipscore", "CLIP-S", "reference-free", 75,
     ((51.1, 51.2), (34.4, 17.7), (50.5, 47.9), (49.8, 53.8)), ""),
    ("expert_judge", "EXPERT", "reference-free", 85,
     ((None, 56.7), (39.3, None), (None, 54.9), (None, 65.0)), _LLAVA),
)
# fmt: on

PUBLISHED: tuple[PublishedFigure, ...] = (
    # VATEX-EVAL (Table 2): reference-based, then reference-free.
    _t2("emscore_ref", "EMScore", "1-ref", 28.6, 37.1, 96),
    _t2("emscore_ref", "EMScore", "9-ref", 36.8, 47.2, 96),
    _t2("refpacs", "RefPAC-S", "1-ref", 31.4, 40.5, 97),
    _t2("refpacs", "RefPAC-S", "9-ref", 38.1, 48.8, 97),
    _t2("gveval_judge", "G-VEval", "1-ref", 44.9, None, 100, _GPT4O),
    _t2("gveval_judge", "G-VEval", "9-ref", 48.1, None, 100, _GPT4O),
    _t2("emscore", "EMScore", "reference-free", 23.2, 30.3, 103),
    _t2("pacs", "PAC-S", "reference-free", 25.1, 32.6, 104),
    # The lexical rows, recalled (docs/metrics.md, "VATEX-EVAL: reproduced, and the paper's
    # figures as recalled").
    *(
        PublishedFigure(
            metric,
            label,
            VATEX_EVAL,
            setting,
            (("kendall_b", tau), ("spearman", rho)),
            RECALLED,
            "docs/metrics.md",
            False,
        )
        for metric, label, setting, tau, rho in (
            ("bleu1", "BLEU-1", "1-ref", 12.2, 15.9),
            ("bleu1", "BLEU-1", "9-ref", 28.9, 37.0),
            ("rougeL", "ROUGE-L", "1-ref", 12.5, 16.3),
            ("rougeL", "ROUGE-L", "9-ref", 23.8, 30.9),
            ("meteor", "METEOR", "1-ref", 16.4, 21.5),
            ("meteor", "METEOR", "9-ref", 27.6, 35.7),
            ("cider", "CIDEr", "1-ref", 17.3, 22.6),
            ("cider", "CIDEr", "9-ref", 27.8, 36.1),
        )
    ),
    # Image benchmarks (Table 1).
    *(figure for row in _TABLE_1 for figure in _t1(*row)),
)

# Metrics that read no references: their published reference-free figure goes beside every
# reference setting of ours.
REFERENCE_FREE_METRICS = frozenset(
    {"clipscore", "emscore", "lclipscore", "pacs", "expert_judge", "captionqa"}
)


def published_setting(
    metric: str, reference_count: int | None, references_per_candidate: int | None
) -> str:
    """The published setting our run under `reference_count` (None: all) corresponds to."""
    if metric in REFERENCE_FREE_METRICS:
        return "reference-free"
    count = reference_count if reference_count is not None else references_per_candidate
    return f"{count}-ref" if count else "references"


def published_for(benchmark: str, metric: str, setting: str) -> list[PublishedFigure]:
    return [
        figure
        for figure in PUBLISHED
        if figure.benchmark == benchmark and figure.metric == metric and figure.setting == setting
    ]
