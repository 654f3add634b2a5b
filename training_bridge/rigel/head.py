"""The scoring head of Phase 1: a small MLP from the backbone's final hidden state to five ordinal
score logits (paper Section 3.1).

Widths hidden -> hidden/2 -> hidden/4 -> 5: at hidden size 2048 (Qwen3-VL-2B) that is
2048*1024+1024 + 1024*512+512 + 512*5+5 = 2,625,541 trainable parameters, the paper's 2.63M
(Appendix D), and about 5 MFLOPs per sample (the paper's 0.01 GFLOPs).
"""

from __future__ import annotations

import torch
from torch import nn

NUM_SCORES = 5


def head_widths(hidden_size: int) -> tuple[int, int]:
    return max(8, hidden_size // 2), max(8, hidden_size // 4)


class ScoringHead(nn.Module):
    def __init__(self, hidden_size: int, *, dropout: float = 0.1) -> None:
        super().__init__()
        first, second = head_widths(hidden_size)
        self.hidden_size = hidden_size
        self.net = nn.Sequential(
            nn.Linear(hidden_size, first),
            nn.GELU(),
            nn.Dropout(dropout),
            nn.Linear(first, second),
            nn.GELU(),
            nn.Dropout(dropout),
            nn.Linear(second, NUM_SCORES),
        )

    def forward(self, hidden: torch.Tensor) -> torch.Tensor:
        return self.net(hidden)


def count_parameters(module: nn.Module, *, trainable_only: bool = True) -> int:
    return sum(p.numel() for p in module.parameters() if p.requires_grad or not trainable_only)


def build_head(hidden_size: int, *, dropout: float = 0.1, seed: int | None = None) -> ScoringHead:
    """A freshly initialised head; with `seed` the initialisation is reproducible."""
    if seed is None:
        return ScoringHead(hidden_size, dropout=dropout)
    state = torch.random.get_rng_state()
    try:
        torch.manual_seed(seed)
        return ScoringHead(hidden_size, dropout=dropout)
    finally:
        torch.random.set_rng_state(state)


def head_to_bytes(head: ScoringHead, *, dropout: float = 0.1) -> bytes:
    """The head's weights as safetensors, with what is needed to rebuild it in the metadata."""
    from safetensors.torch import save

    state = {name: tensor.detach().cpu().contiguous() for name, tensor in head.state_dict().items()}
    return save(state, metadata={"hidden_size": str(head.hidden_size), "dropout": str(dropout)})


def head_from_bytes(data: bytes) -> ScoringHead:
    import json

    from safetensors.torch import load

    length = int.from_bytes(data[:8], "little")
    metadata = json.loads(data[8 : 8 + length]).get("__metadata__") or {}
    head = ScoringHead(int(metadata["hidden_size"]), dropout=float(metadata.get("dropout", 0.1)))
    head.load_state_dict(load(data))
    head.eval()
    return head
