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
    tokenizer = CLIPTokenizer(vocab=vocab, merges=[], model_max_length=77)
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
        self._cache: dict[tuple[str, str], np.ndarray] = {}

    def encode(self, text: str) -> dict[str, Any]:
        """CLIP's 77 tokens at most, the end-of-text token kept."""
        return dict(self.tokenizer([text], truncation=True, max_length=77, return_tensors="pt"))

    def token_ids(self, text: str) -> list[int]:
        return [int(token) for token in self.encode(text)["input_ids"][0]]

    def caption(self, text: str) -> np.ndarray:
        import torch

        if ("caption", text) in self._cache:
            return self._cache[("caption", text)]
        with torch.no_grad():
            output = self.model.get_text_features(**self.encode(text))
        result = self._cache[("caption", text)] = output.pooler_output[0].double().numpy()
        return result

    def tokens(self, text: str) -> np.ndarray:
        """Every token's projected embedding, start-of-text to end-of-text."""
        import torch

        if ("tokens", text) in self._cache:
            return self._cache[("tokens", text)]
        with torch.no_grad():
            hidden = self.model.text_model(**self.encode(text)).last_hidden_state
            result = self.model.text_projection(hidden)[0].double().numpy()
        self._cache[("tokens", text)] = result
        return result

    def frames(self, frames: np.ndarray) -> np.ndarray:
        import torch

        key = ("frames", f"{frames.shape} {hash(frames.tobytes())}")
        if key in self._cache:
            return self._cache[key]

        pixels = self.processor(
            images=list(frames), return_tensors="pt", input_data_format="channels_last"
        )["pixel_values"]
        with torch.no_grad():
            result = self.model.get_image_features(pixel_values=pixels).pooler_output
        self._cache[key] = result.double().numpy()
        return self._cache[key]
