"""Image captioning benchmarks for Rigel: the generic image JSONL, each benchmark's protocol and
the paper's published rows (no Django; the Django side is ``evaluate_rigel --image-benchmark``).

The generic image JSONL (the image contract; also what ``import_images`` reads and what the
converters in ``image_converters.py`` write) holds one image per line::

    {"image_id": "flickr_123", "image": "123.jpg", "references": ["...", ...],
     "candidates": [{"caption": "...", "system": "...",
                     "judgments": [{"rater": "expert1", "overall": 3}, ...]}],
     "scale": [1, 4]}

``image`` is a file name under the images directory given beside the file; ``overall`` is on the
line's ``scale`` (or the one given to :func:`read_image_benchmark`).

The paper evaluates on Flickr8K-Expert, Flickr8K-CF, Composite and Nebula with Kendall's tau_b and
tau_c for each ("we used Kendall's [tau_b] and [tau_c] for the Composite, Flickr8K-Expert,
Flickr8K-CF, and Nebula datasets", seed 000 line 123) and prints both per benchmark in Table 1
(lines 52-88), Table 3 (lines 109-115) and Table 5 (lines 217-220). The tau symbols are lost in
our copy of the paper; the column order (tau_b, then tau_c) is read off Table 1's CLIP-S row
(line 75: Flickr8K-Expert 51.1 | 51.2, Flickr8K-CF 34.4 | 17.7, Composite 49.8 | 53.8), whose
tau_c 51.2 on Flickr8K-Expert, tau_b 34.4 on Flickr8K-CF and tau_c 53.8 on Composite are the
values the CLIPScore paper reports (recalled, unverified).

How the human side is counted follows the benchmarks' usual practice (CLIPScore's Appendix A,
recalled, unverified): Flickr8K-Expert correlates every expert judgment (three per caption, the
candidate's score repeated); Flickr8K-CF, Composite and Nebula one point per candidate (the share
of "yes" votes, the one rating, the published mean score).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import PurePosixPath
from typing import Any

import numpy as np

from training_bridge.rigel.benchmark import ALL_REFS, REFERENCE_FREE
from training_bridge.rigel.data import json_objects
from training_bridge.rigel.evaluate import correlation_row

IMAGE_PROTOCOLS = (REFERENCE_FREE, ALL_REFS)
JUDGMENT = "judgment"  # one point per human judgment
CANDIDATE = "candidate"  # one point per candidate (mean of its judgments)

MAX_LINE_BYTES = 1_000_000
MAX_CANDIDATES = 1000
MAX_REFERENCES = 100


class ImageBenchmarkError(ValueError):
    """An image benchmark file that cannot be read; the message names the line."""


@dataclass(frozen=True)
class ImageBenchmark:
    name: str
    title: str
    unit: str
    # Table 1, "Ours" (Rigel): (tau_b, tau_c) x100 per setting; None where the paper prints none.
    paper_table1: dict[str, tuple[float, float] | None]
    # Tables 3 and 5 (reference-free runs, see docs/training.md): (tau_b, tau_c) per ablation.
    paper_ablations: dict[str, tuple[float, float]] = field(default_factory=dict)
    source: str = ""


# Table 1 (seed 000): "Ours" reference-based, line 73; reference-free, line 88.
# Table 3 (lines 111-115): rows (i) LM head, (ii) no Phase 2, (iii) random head, (iv) the
# Qwen2.5-VL-3B backbone, (v) the full method; Table 5 (lines 219-220): (i) KL, (ii) EMD (= (v)).
# Tables 3 and 5 print Composite, Flickr8K-EX and Nebula only (no Flickr8K-CF).
IMAGE_BENCHMARKS: dict[str, ImageBenchmark] = {
    "flickr8k-expert": ImageBenchmark(
        name="flickr8k-expert",
        title="Flickr8K-Expert",
        unit=JUDGMENT,
        paper_table1={ALL_REFS: (58.6, 59.0), REFERENCE_FREE: (59.5, 59.9)},
        paper_ablations={
            "lm_head": (59.0, 59.4),
            "phase1_only": (22.3, 22.6),
            "random_head": (58.8, 59.2),
            "qwen2_5_vl": (59.2, 59.7),
            "full": (59.5, 59.9),
            "kl_loss": (59.3, 59.7),
        },
        source="Hodosh et al. (2013): ExpertAnnotations.txt + Flickr8k.token.txt",
    ),
    "flickr8k-cf": ImageBenchmark(
        name="flickr8k-cf",
        title="Flickr8K-CF",
        unit=CANDIDATE,
        paper_table1={ALL_REFS: (40.4, 20.9), REFERENCE_FREE: (40.4, 20.9)},
        source="Hodosh et al. (2013): CrowdFlowerAnnotations.txt + Flickr8k.token.txt",
    ),
    "composite": ImageBenchmark(
        name="composite",
        title="Composite",
        unit=CANDIDATE,
        paper_table1={ALL_REFS: (61.2, 66.1), REFERENCE_FREE: (59.5, 64.3)},
        paper_ablations={
            "lm_head": (58.3, 63.0),
            "phase1_only": (53.1, 57.4),
            "random_head": (58.0, 62.8),
            "qwen2_5_vl": (59.4, 64.2),
            "full": (59.5, 64.3),
            "kl_loss": (59.0, 63.8),
        },
        source="Aditya et al. (2015): the AMT judgment CSVs + the three caption corpora",
    ),
    "nebula": ImageBenchmark(
        name="nebula",
        title="Nebula",
        unit=CANDIDATE,
        paper_table1={ALL_REFS: (60.6, 57.5), REFERENCE_FREE: (58.1, 55.1)},
        paper_ablations={
            "lm_head": (57.4, 54.4),
            "phase1_only": (52.2, 55.1),
            "random_head": (56.3, 53.4),
            "qwen2_5_vl": (57.3, 54.3),
            "full": (58.1, 55.1),
            "kl_loss": (57.7, 54.7),
        },
        source="Matsuda et al. (2024): the Nebula test split (Hugging Face Ka2ukiMatsuda/Nebula)",
    ),
}


ABLATION_LINES = {
    "lm_head": "Table 3 (i), line 111",
    "phase1_only": "Table 3 (ii), line 112",
    "random_head": "Table 3 (iii), line 113",
    "qwen2_5_vl": "Table 3 (iv), line 114",
    "full": "Table 3 (v), line 115",
    "kl_loss": "Table 5 (i), line 219",
}


@dataclass(frozen=True)
class ImageCandidate:
    caption: str
    system: str
    judgments: tuple[float, ...]  # on [0, 1] (the line's scale mapped linearly)


@dataclass(frozen=True)
class ImageItem:
    image_id: str
    image: str
    references: tuple[str, ...]
    candidates: tuple[ImageCandidate, ...]


def _text(value: Any, where: str) -> str:
    if not isinstance(value, str) or not value.strip():
        raise ImageBenchmarkError(f"{where} must be a non-empty string")
    return " ".join(value.split())


def _scale(value: Any, where: str) -> tuple[float, float]:
    if (
        not isinstance(value, (list, tuple))
        or len(value) != 2
        or not all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in value)
        or not float(value[0]) < float(value[1])
    ):
        raise ImageBenchmarkError(f"{where}: scale must be [low, high] with low < high")
    return float(value[0]), float(value[1])


def safe_image_name(name: Any, where: str) -> str:
    """A relative file name inside the images directory (no absolute path, no '..')."""
    text = _text(name, f"{where}: image")
    path = PurePosixPath(text.replace("\\", "/"))
    if path.is_absolute() or ".." in path.parts or not path.parts:
        raise ImageBenchmarkError(f"{where}: image {text!r} must be a file name in the folder")
    return str(path)


def read_image_benchmark(
    lines: Iterable[str], *, scale: Sequence[float] | None = None, name: str = "the file"
) -> list[ImageItem]:
    """The images of a generic image JSONL, checked; judgments mapped to [0, 1] by the scale."""
    default = _scale(list(scale), "--scale") if scale is not None else None
    items: list[ImageItem] = []
    seen: set[str] = set()
    for where, raw in json_objects(
        lines, f"{name}, line", ImageBenchmarkError, max_bytes=MAX_LINE_BYTES
    ):
        image_id = _text(raw.get("image_id"), f"{where}: image_id")
        if image_id in seen:
            raise ImageBenchmarkError(f"{where}: image_id {image_id!r} appears twice")
        seen.add(image_id)
        image = safe_image_name(raw.get("image"), where)
        references = raw.get("references") or []
        if not isinstance(references, list) or len(references) > MAX_REFERENCES:
            raise ImageBenchmarkError(f"{where}: references must be a list of strings")
        refs = tuple(_text(r, f"{where}: a reference") for r in references)
        line_scale = _scale(raw["scale"], where) if raw.get("scale") is not None else default
        candidates = raw.get("candidates")
        if not isinstance(candidates, list) or not candidates or len(candidates) > MAX_CANDIDATES:
            raise ImageBenchmarkError(
                f"{where}: candidates must be a list of 1 to {MAX_CANDIDATES} objects"
            )
        parsed: list[ImageCandidate] = []
        for position, candidate in enumerate(candidates, start=1):
            at = f"{where}, candidate {position}"
            if not isinstance(candidate, dict):
                raise ImageBenchmarkError(f"{at}: expected an object")
            judgments = candidate.get("judgments") or []
            if not isinstance(judgments, list):
                raise ImageBenchmarkError(f"{at}: judgments must be a list")
            values: list[float] = []
            for judgment in judgments:
                overall = judgment.get("overall") if isinstance(judgment, dict) else None
                if not isinstance(overall, (int, float)) or isinstance(overall, bool):
                    raise ImageBenchmarkError(f"{at}: every judgment needs a number 'overall'")
                if line_scale is None:
                    raise ImageBenchmarkError(f"{at}: judgments need a scale (--scale or 'scale')")
                low, high = line_scale
                if not low <= float(overall) <= high or math.isnan(float(overall)):
                    raise ImageBenchmarkError(f"{at}: overall {overall} is outside [{low}, {high}]")
                values.append((float(overall) - low) / (high - low))
            parsed.append(
                ImageCandidate(
                    caption=_text(candidate.get("caption"), f"{at}: caption"),
                    system=str(candidate.get("system") or ""),
                    judgments=tuple(values),
                )
            )
        items.append(ImageItem(image_id, image, refs, tuple(parsed)))
    if not items:
        raise ImageBenchmarkError(f"{name} holds no image")
    return items


def flat_candidates(items: Sequence[ImageItem]) -> list[tuple[ImageItem, ImageCandidate]]:
    """Every (image, candidate) pair in file order: what gets scored."""
    return [(item, candidate) for item in items for candidate in item.candidates]


def correlation_points(
    benchmark: ImageBenchmark,
    pairs: Sequence[tuple[ImageItem, ImageCandidate]],
    scores: Sequence[float] | np.ndarray,
) -> tuple[np.ndarray, np.ndarray]:
    """(metric, human) points under the benchmark's unit; candidates without judgments are
    left out of the correlation."""
    metric: list[float] = []
    human: list[float] = []
    for (_, candidate), score in zip(pairs, scores, strict=True):
        if not candidate.judgments:
            continue
        if benchmark.unit == JUDGMENT:
            metric.extend(float(score) for _ in candidate.judgments)
            human.extend(candidate.judgments)
        else:
            metric.append(float(score))
            human.append(float(np.mean(candidate.judgments)))
    return np.asarray(metric, dtype=float), np.asarray(human, dtype=float)


def benchmark_row(
    benchmark: ImageBenchmark,
    pairs: Sequence[tuple[ImageItem, ImageCandidate]],
    scores: Sequence[float] | np.ndarray,
) -> dict[str, Any]:
    """Kendall tau_b and tau_c (x100) of the scores against the human side, and the points."""
    metric, human = correlation_points(benchmark, pairs, scores)
    if len(metric) < 2:
        raise ImageBenchmarkError("fewer than two judged points: nothing to correlate")
    row = correlation_row(metric, human)
    return {"kendall_b": row["kendall_b"], "kendall_c": row["kendall_c"], "points": len(metric)}


def paper_row(benchmark: ImageBenchmark, protocol: str, ablation: str) -> dict[str, Any] | None:
    """The paper's (tau_b, tau_c) for this benchmark, protocol and method variant, with its place;
    None where the paper prints none. The full method's rows come from Table 1; an ablation's
    from Tables 3/5, which the paper ran reference-free."""
    if ablation == "full":
        values = benchmark.paper_table1.get(protocol)
        where = "Table 1, line 73" if protocol == ALL_REFS else "Table 1, line 88"
    elif protocol == REFERENCE_FREE and ablation in benchmark.paper_ablations:
        values = benchmark.paper_ablations[ablation]
        where = ABLATION_LINES[ablation]
    else:
        values = None
        where = ""
    if values is None:
        return None
    return {"kendall_b": values[0], "kendall_c": values[1], "where": f"seed 000, {where}"}
