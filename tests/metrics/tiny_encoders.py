"""Tiny random transformers checkpoints beside `tiny_clip`: a BERT sentence encoder (stands in for
GTE and SimCSE) and a ViT (stands in for DINO), each saved with its tokenizer or image processor."""

from __future__ import annotations

import string
from pathlib import Path


def save_tiny_bert(directory: Path, *, seed: int = 0) -> Path:
    """A 2-layer BERT (width 24) whose WordPiece vocabulary is single characters."""
    import torch
    from transformers import BertConfig, BertModel, BertTokenizer

    directory.mkdir(parents=True, exist_ok=True)
    characters = string.ascii_lowercase + string.digits + string.punctuation
    vocab = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", *characters]
    vocab += [f"##{character}" for character in characters]
    (directory / "vocab.txt").write_text("\n".join(vocab) + "\n", encoding="utf-8")
    tokenizer = BertTokenizer(str(directory / "vocab.txt"))
    config = BertConfig(
        vocab_size=len(vocab),
        hidden_size=24,
        num_hidden_layers=2,
        num_attention_heads=4,
        intermediate_size=48,
        max_position_embeddings=128,
    )
    torch.manual_seed(seed)
    BertModel(config).eval().save_pretrained(directory)
    tokenizer.save_pretrained(directory)
    return directory


def save_tiny_vit(directory: Path, *, seed: int = 0) -> Path:
    """A 2-layer ViT (width 32, 32x32 images, patch 8) with an ImageNet-normalising processor."""
    import torch
    from transformers import ViTConfig, ViTImageProcessor, ViTModel

    config = ViTConfig(
        hidden_size=32,
        num_hidden_layers=2,
        num_attention_heads=4,
        intermediate_size=64,
        image_size=32,
        patch_size=8,
    )
    torch.manual_seed(seed)
    ViTModel(config, add_pooling_layer=False).eval().save_pretrained(directory)
    ViTImageProcessor(size={"height": 32, "width": 32}).save_pretrained(directory)
    return directory
