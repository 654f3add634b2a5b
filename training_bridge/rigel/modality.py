"""The two kinds of visual input Rigel reads: a video clip, or a still image (one frame, T = 1;
paper Section 3, seed 000 line 36). Release records, examples and prompts name them so."""

from __future__ import annotations

VIDEO = "video"
IMAGE = "image"
MODALITIES = (VIDEO, IMAGE)


def check_modality(modality: str) -> str:
    if modality not in MODALITIES:
        raise ValueError(f"unknown modality {modality!r}; known: {', '.join(MODALITIES)}")
    return modality
