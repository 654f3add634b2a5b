"""From five score logits to one score in [0, 1] (paper Section 3.3).

Two quantities, two names: the expected rating ``s = sum_i p_i * i`` over the labels 1..5 (score
smoothing; :func:`expected_rating`, on the 1..5 scale), and the normalised score ``(s - 1) / 4``
(:func:`normalised_score`, in [0, 1]), which is what Rigel reports.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import torch


def expected_rating(logits: torch.Tensor) -> torch.Tensor:
    """The expected rating on the 1..5 scale: sum_i softmax(logits)_i * i; shape [..., 5] -> [...]."""
    probabilities = torch.softmax(logits.float(), dim=-1)
    labels = torch.arange(1, logits.shape[-1] + 1, dtype=probabilities.dtype, device=logits.device)
    return (probabilities * labels).sum(dim=-1)


def rating_moments(probabilities: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The expected rating on the 1..K scale and the distribution's standard deviation (same
    scale), per row of K-way probabilities [N, K]: the metric's score and its uncertainty."""
    labels = np.arange(1, probabilities.shape[-1] + 1, dtype=np.float64)
    expected = probabilities @ labels
    variance = probabilities @ (labels**2) - expected**2
    return expected, np.sqrt(np.clip(variance, 0.0, None))


def normalised_score(logits: torch.Tensor) -> torch.Tensor:
    """The score in [0, 1]: the expected rating mapped linearly from [1, 5] to [0, 1]."""
    return (expected_rating(logits) - 1.0) / (logits.shape[-1] - 1)


# --- scoring with a trained run ---------------------------------------------------------------


class TrainedRigel:
    """A backbone with the run's LoRA adapter (if Phase 2 ran) and scoring head (unless the run is
    the LM-head ablation), ready to score (video, references, candidate) triples."""

    def __init__(self, *, backbone: Any, head: Any | None, reference_free: bool) -> None:
        self.backbone = backbone
        self.head = head
        self.reference_free = reference_free
        self.engine: Any | None = None  # a ScoringEngine over the same backbone and head

    @torch.no_grad()
    def score_logits(self, examples: Sequence[Any]) -> torch.Tensor:
        from training_bridge.rigel.inputs import build_batch
        from training_bridge.rigel.score_logits import head_score_logits

        batch = build_batch(
            examples,
            self.backbone,
            reference_free=self.reference_free,
            device=self.backbone.device,
        )
        return head_score_logits(self.backbone, self.head, batch).float().cpu()

    def score(self, examples: Sequence[Any], *, batch_size: int = 16) -> np.ndarray:
        """Normalised scores in [0, 1], one per example."""
        if self.engine is not None:
            if not examples:
                return np.zeros(0)
            output = self.engine.run(list(examples))
            logits = output.head_logits if output.head_logits is not None else output.score_logits
            return normalised_score(torch.from_numpy(logits)).double().numpy()
        parts = [
            normalised_score(self.score_logits(examples[start : start + batch_size]))
            for start in range(0, len(examples), batch_size)
        ]
        if not parts:
            return np.zeros(0)
        return torch.cat(parts).double().numpy()

    def rating_distribution(self, examples: Sequence[Any], *, batch_size: int = 16) -> np.ndarray:
        """The K-way rating distribution (softmax of the score logits), one row per example."""
        if self.engine is not None:
            if not examples:
                return np.zeros((0, 5))
            output = self.engine.run(list(examples))
            logits = output.head_logits if output.head_logits is not None else output.score_logits
            return torch.softmax(torch.from_numpy(logits).float(), dim=-1).double().numpy()
        parts = [
            torch.softmax(self.score_logits(examples[start : start + batch_size]), dim=-1)
            for start in range(0, len(examples), batch_size)
        ]
        if not parts:
            return np.zeros((0, 5))
        return torch.cat(parts).double().numpy()


def load_trained(
    *,
    backbone: Any,
    head_bytes: bytes | None,
    adapter_files: dict[str, bytes] | None,
    reference_free: bool,
) -> TrainedRigel:
    """Attach a run's artifacts to a freshly loaded backbone."""
    import tempfile
    import warnings
    from pathlib import Path

    from training_bridge.rigel.head import head_from_bytes

    if adapter_files:
        from peft import PeftModel

        with tempfile.TemporaryDirectory() as folder, warnings.catch_warnings():
            # PEFT asks transformers a deprecated question (is_gradient_checkpointing).
            warnings.simplefilter("ignore", FutureWarning)
            for name, data in adapter_files.items():
                (Path(folder) / name).write_bytes(data)
            peft_model = PeftModel.from_pretrained(backbone.model, folder, is_trainable=False)
        backbone.extra["peft_model"] = peft_model
    backbone.model.eval()
    head = None
    if head_bytes is not None:
        head = head_from_bytes(head_bytes).to(backbone.device)
    return TrainedRigel(backbone=backbone, head=head, reference_free=reference_free)
