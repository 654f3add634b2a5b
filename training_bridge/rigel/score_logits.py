"""Five score logits from the backbone's last position: the one forward Rigel runs at inference
and Phase 2 trains through.

Below both `scoring` (inference) and `phase2` (training), so that neither reaches into the other.
The logits come from the scoring head or, without one (the LM-head ablation), from the LM head's
rows of "1".."5" (`score_token_logits`, also the teacher's scores in Phase 1). A backbone that
carries LoRA adapters runs under `adapter_autocast`; the head (float32) outside it.
"""

from __future__ import annotations

import contextlib
from typing import Any

import torch

from training_bridge.rigel.head import ScoringHead


def score_token_logits(backbone: Any, hidden: torch.Tensor) -> torch.Tensor:
    """The LM head's logits of the score tokens "1".."5" at `hidden` [B, H] -> [B, 5] (float32),
    without computing the whole vocabulary."""
    lm_head = backbone.model.lm_head
    ids = torch.as_tensor(backbone.score_token_ids, device=hidden.device)
    weight = lm_head.weight.index_select(0, ids)
    logits = hidden.to(weight.dtype) @ weight.T
    if getattr(lm_head, "bias", None) is not None:
        logits = logits + lm_head.bias.index_select(0, ids)
    return logits.float()


def adapter_autocast(backbone: Any) -> contextlib.AbstractContextManager[Any]:
    """The context of a forward through a backbone that carries LoRA adapters.

    The adapters are float32 master weights (with their Adam state) whatever the backbone's
    dtype; on a bf16 / fp16 backbone the forward runs under autocast to that dtype, so every
    matmul, the adapters' included, stays a bf16 product (autocast casts the float32 adapter
    weights for the product, and their gradients come back float32). A float32 backbone, or one
    without adapters, needs nothing."""
    dtype = backbone.dtype
    if dtype == torch.float32 or "peft_model" not in backbone.extra:
        return contextlib.nullcontext()
    return torch.autocast(device_type=backbone.device.type, dtype=dtype)


def hidden_score_logits(
    backbone: Any, head: ScoringHead | None, hidden: torch.Tensor
) -> torch.Tensor:
    """Five score logits from the last position's hidden state [B, H]: through the scoring head,
    or (head None) through the LM head's score rows."""
    if head is None:
        return score_token_logits(backbone, hidden)
    head_parameter = next(head.parameters())
    return head(hidden.to(head_parameter.device, head_parameter.dtype))


def head_score_logits(
    backbone: Any, head: ScoringHead | None, batch: dict[str, torch.Tensor]
) -> torch.Tensor:
    """Five score logits for a batch: the backbone under :func:`adapter_autocast`, then
    :func:`hidden_score_logits` at the last position."""
    with adapter_autocast(backbone):
        outputs = backbone.model.model(**batch, use_cache=False)
    return hidden_score_logits(backbone, head, outputs.last_hidden_state[:, -1])
