"""Phase 1's losses written with autograd (paper Eq. 2 and Appendix E): the oracles that
`phase1.HeadStep`'s written-out gradient is checked against. Training uses `HeadStep` only."""

from __future__ import annotations

import torch
import torch.nn.functional as F


def emd_1d(p: torch.Tensor, q: torch.Tensor) -> torch.Tensor:
    """One-dimensional Earth Mover's Distance between distributions over ordered labels.

    With unit spacing between the labels, EMD is the L1 distance between the cumulative
    distribution functions: sum_k |P(<= k) - Q(<= k)|. Returns one value per row.
    """
    return (torch.cumsum(p, dim=-1) - torch.cumsum(q, dim=-1)).abs().sum(dim=-1)


def phase1_distillation_loss(
    student_logits: torch.Tensor, teacher_score_logits: torch.Tensor, temperature: float
) -> torch.Tensor:
    """T^2 * EMD(softmax(student / T), softmax(teacher / T)), averaged over the batch.

    The teacher's five score logits are softened by the temperature into the pseudo-label
    distribution (Eq. 1); the student is softened the same way, as in standard distillation, and
    the T^2 factor keeps the gradient scale independent of T.
    """
    target = F.softmax(teacher_score_logits.float() / temperature, dim=-1)
    student = F.softmax(student_logits.float() / temperature, dim=-1)
    return emd_1d(student, target).mean() * (temperature**2)


def phase1_kl_loss(
    student_logits: torch.Tensor, teacher_score_logits: torch.Tensor, temperature: float
) -> torch.Tensor:
    """T^2 * KL(softmax(teacher / T) || softmax(student / T)), averaged over the batch: the
    objective of the kl_loss ablation (Appendix E, Table 5's (i))."""
    target = F.softmax(teacher_score_logits.float() / temperature, dim=-1)
    log_student = F.log_softmax(student_logits.float() / temperature, dim=-1)
    return F.kl_div(log_student, target, reduction="batchmean") * (temperature**2)
