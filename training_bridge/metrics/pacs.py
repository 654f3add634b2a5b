"""PAC-S and RefPAC-S (Sarto et al., "Positive-Augmented Contrastive Learning for Image and Video
Captioning Evaluation", CVPR 2023) and their ++ variant (PAC-S++), as `plugins.CaptionMetric`s.

The formulas are CLIP-S's with the PAC-S weight w = 2.0 instead of 2.5, on the PAC-S fine-tuned
CLIP (aimagelab/pacscore at bfbc488, `evaluation/pac_score/pac_score.py`, `PACScore(..., w=2.0)`
and `compute_metrics.py`, which passes w=2.0):

- PAC-S(c, v) = w · max(cos(c, v), 0);
- RefPAC-S(c, R, v) = H-Mean(PAC-S(c, v), max_{r∈R} cos(c, r)) (`compute_correlations.py`,
  `2 * pac * tt / (pac + tt)`);
- every caption and reference is prefixed with "A photo depicts " (`CapDataset(prefix=...)`).

PAC-S++ (`compute_correlations_pac++.py`) runs the same `compute_scores` — same w, same prefix —
on the PAC++ checkpoint (CLIP with LoRA rank 4, merged into plain CLIP weights before use here);
so `pacs_plus`/`refpacs_plus` are these plug-ins on the `pacs_plus_model` weights.

One difference from the authors' code, on purpose: the text side of RefPAC-S is clamped at 0
(as RefCLIP-S's is, `clip.reference_similarity`); the two differ only when every reference has a
negative cosine with the candidate, where the authors' harmonic mean is not a meaningful number.

Video: the clip's sampled frames, embedded one by one and averaged (EMScore-style, see
`clip.video_embedding`); PAC-S's own video evaluation (the paper's VATEX-EVAL rows) averages the
frame embeddings the same way (recalled, unverified).
"""

from __future__ import annotations

from training_bridge.metrics.clip import ClipEncoder, ClipScore

PACS_WEIGHT = 2.0
PACS_PROMPT = "A photo depicts"


def pac_score(
    name: str, encoder: ClipEncoder, *, with_references: bool, prompt: str = PACS_PROMPT
) -> ClipScore:
    """PAC-S (`with_references=False`) or RefPAC-S on PAC-S (or PAC-S++) weights."""
    return ClipScore(
        name, encoder, with_references=with_references, prompt=prompt, weight=PACS_WEIGHT
    )
