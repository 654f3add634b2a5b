"""The Rigel tests' oracles: what the product computes another way, written the plain way.

- Phase 1's losses with autograd (paper Eq. 2 and Appendix E), against which
  `phase1.HeadStep`'s written-out gradient is checked (training uses `HeadStep` only);
- the processor's text expansion of ``<|video_pad|>`` (`video_placeholder`, `expand_prompt`),
  against which `inputs.tokenize_expanded` is checked;
- one clip through the batched preprocessing (`preprocess_video`) and the count of its video
  tokens (`video_token_count`).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import torch
import torch.nn.functional as F

from training_bridge.rigel.backbone import Backbone, VisionSettings
from training_bridge.rigel.video import frames_to_tensor, preprocess_clips, timestamps


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


def video_placeholder(
    grid: Sequence[int], indices: Sequence[int], fps: float, backbone: Backbone
) -> str:
    """The text that replaces the prompt's ``<|video_pad|>`` (what the processor inserts)."""
    vision = backbone.vision
    tokenizer = backbone.tokenizer
    pad = tokenizer.convert_ids_to_tokens(backbone.video_token_id)
    t, h, w = (int(x) for x in grid)
    per_group = h * w // (vision.merge_size**2)
    if not vision.timestamps:  # Qwen2.5-VL: all groups in one run
        return pad * (t * per_group)
    start = tokenizer.convert_ids_to_tokens(backbone.vision_start_token_id)
    end = tokenizer.convert_ids_to_tokens(backbone.vision_end_token_id)
    times = timestamps(indices, fps, vision.temporal_patch_size)
    return "".join(f"<{times[k]:.1f} seconds>{start}{pad * per_group}{end}" for k in range(t))


def expand_prompt(prompt: str, placeholder: str, backbone: Backbone) -> str:
    pad = backbone.tokenizer.convert_ids_to_tokens(backbone.video_token_id)
    if prompt.count(pad) != 1:
        raise ValueError(f"the prompt must hold exactly one {pad}")
    return prompt.replace(pad, placeholder, 1)


def video_token_count(grid: Sequence[int], vision: VisionSettings) -> int:
    t, h, w = (int(x) for x in grid)
    return t * h * w // (vision.merge_size**2)


def preprocess_video(
    frames: np.ndarray | torch.Tensor, vision: VisionSettings, *, device: str | torch.device = "cpu"
) -> tuple[torch.Tensor, tuple[int, int, int]]:
    """One clip (T, H, W, 3) uint8 -> (pixel_values_videos (N, C·tp·p·p) float32, (t, h, w))."""
    tensor = frames_to_tensor(frames).to(device)
    values, grid = preprocess_clips(tensor.unsqueeze(0), vision)
    return values[0], grid
