"""Phase 2's loss (paper Eq. 3). Phase 1's EMD and KL objectives are written out with their
gradient in `phase1.HeadStep`; their autograd forms are the tests' oracles (tests/rigel/oracles.py)."""

from __future__ import annotations

import torch
import torch.nn.functional as F


def phase2_loss(score_logits: torch.Tensor, class_index: torch.Tensor) -> torch.Tensor:
    """Cross-entropy of the five-way output against the one-hot human class (Eq. 3)."""
    return F.cross_entropy(score_logits.float(), class_index)
