"""A tiny random CLIP saved as a transformers checkpoint (config, weights, tokenizer, image
processor), for the learned-metric plug-ins, and the embeddings of its public API that the tests
compute their expected scores from (independently of `training_bridge.metrics.clip`)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np


def save_tiny_clip(directory: Path, *, seed: int = 0) -> Path:
    """Write a 2-layer CLIP (width 32, projection 16, 32x32 images) with a byte-level tokenizer
    that has no merges (every character is a token) to `directory`."""
    import torch
    from tokenizers import pre_tokenizers
    from transformers import CLIPConfig, CLIPImageProcessor, CLIPModel, CLIPTokenizer

    vocab = {"<|startoftext|>": 0, "<|endoftext|>": 1}
    alphabet = sorted(pre_tokenizers.ByteLevel.alphabet())
    for suffix in ("", "</w>"):
        for character in alphabet:
            vocab[character + suffix] = len(vocab)
    tokenizer = CLIPTokenizer(vocab=vocab, merges=[])
    layers = {"intermediate_size": 64, "num_hidden_layers": 2, "num_attention_heads": 4}
    config = CLIPConfig(
        text_config={
            **layers,
            "vocab_size": len(vocab),
            "hidden_size": 32,
            "max_position_embeddings": 77,
            "bos_token_id": tokenizer.bos_token_id,
            "eos_token_id": tokenizer.eos_token_id,
            "pad_token_id": tokenizer.pad_token_id,
        },
        vision_config={**layers, "hidden_size": 32, "image_size": 32, "patch_size": 8},
        projection_dim=16,
    )
    torch.manual_seed(seed)
    model = CLIPModel(config).eval()
    directory.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(directory)
    tokenizer.save_pretrained(directory)
    CLIPImageProcessor(
        size={"shortest_edge": 32}, crop_size={"height": 32, "width": 32}
    ).save_pretrained(directory)
    return directory


class Reference:
    """Embeddings through the public transformers API of a saved checkpoint, one text at a time
    (no padding), as float64 NumPy arrays, not normalised."""

    def __init__(self, directory: Path) -> None:
        from transformers import CLIPImageProcessor, CLIPModel, CLIPTokenizer

        self.model: Any = CLIPModel.from_pretrained(directory).eval()
        self.tokenizer: Any = CLIPTokenizer.from_pretrained(directory)
        self.processor: Any = CLIPImageProcessor.from_pretrained(directory)

    def token_ids(self, text: str) -> list[int]:
        return list(self.tokenizer(text)["input_ids"])

    def caption(self, text: str) -> np.ndarray:
        import torch

        with torch.no_grad():
            output = self.model.get_text_features(**self.tokenizer([text], return_tensors="pt"))
        return output.pooler_output[0].double().numpy()

    def tokens(self, text: str) -> np.ndarray:
        """Every token's projected embedding, start-of-text to end-of-text."""
        import torch

        with torch.no_grad():
            hidden = self.model.text_model(
                **self.tokenizer([text], return_tensors="pt")
            ).last_hidden_state
            return self.model.text_projection(hidden)[0].double().numpy()

    def frames(self, frames: np.ndarray) -> np.ndarray:
        import torch

        pixels = self.processor(
            images=list(frames), return_tensors="pt", input_data_format="channels_last"
        )["pixel_values"]
        with torch.no_grad():
            return self.model.get_image_features(pixel_values=pixels).pooler_output.double().numpy()
