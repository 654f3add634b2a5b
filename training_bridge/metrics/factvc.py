"""FactVC (Liu and Wan, "Models See Hallucinations: Evaluating the Factuality in Video
Captioning", EMNLP 2023) as a `plugins.CaptionMetric`.

FactVC is EMScore's machinery (`clip.EMScore`) on the FactVC fine-tuned CLIP
(`factvc_video.pth`), read on its precision side (PKULiuHui/FactVC at 9966892,
`metric/factvc_corr.py`, `get_corr`: the scores it correlates are `full_P`; `metric/emscore/
scorer.py` l.125-163 defines them):

- FactVC(c, v) = (coarse + P) / 2, coarse = cos(c_EOT, v), P = EMScore's idf-weighted fine-grained
  precision of the candidate's tokens against the frames (`full_P` with `cogr_weight=0.5`);
- FactVC(c, R, v) = (FactVC(c, v) + (coarse_R + P_R) / 2) / 2, where coarse_R and P_R are the best
  over the references (as EMScore's `refs_result`), `ref_weight=0.5`.

Precision only: a hallucinated object lowers it, an omission does not (the paper's point: the
metric measures factuality, not coverage). The IDF follows `clip.EMScore` (the authors take it
from their reference paragraphs, `ref_paragraphs.json`: give the reference captions as
`emscore_idf_corpus`, else the scored batch's).

Video: the authors embed frames extracted at 1 fps (`data/extract_frames.py`); here the clip's
sampled frames (the `frames` setting), each embedded and L2-normalised as EMScore does.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from training_bridge.metrics.clip import EMScore, EMScoreParts
from training_bridge.metrics.interface import MetricItem


def factvc_from_parts(parts: EMScoreParts) -> float:
    """FactVC of one candidate from its EMScore terms."""
    video = (parts.video_coarse + parts.video_fine.precision) / 2
    if parts.reference_coarse is None or parts.reference_fine is None:
        return video
    return (video + (parts.reference_coarse + parts.reference_fine.precision) / 2) / 2


@dataclass
class FactVC(EMScore):
    """FactVC(c, v) (`with_references=False`) or FactVC(c, R, v) on FactVC's CLIP."""

    def score(self, items: Sequence[MetricItem]) -> list[float]:
        return [factvc_from_parts(parts) for parts in self.parts(items)]
