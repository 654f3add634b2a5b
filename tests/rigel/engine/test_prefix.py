"""Shared prefixes: the common prefix cut and the suffixes' attention mask."""

from __future__ import annotations

import torch

from training_bridge.rigel.engine.loading import common_prefix_length
from training_bridge.rigel.engine.prefix import suffix_attention_mask


def test_common_prefix_length_keeps_one_token_per_sequence() -> None:
    assert common_prefix_length([[1, 2, 3, 4], [1, 2, 5]]) == 2
    assert common_prefix_length([[1, 2, 3], [1, 2, 3]]) == 2
    assert common_prefix_length([[1, 2, 3], [1, 2, 3, 4]]) == 2
    assert common_prefix_length([[7, 2], [8, 2]]) == 0


def test_suffix_attention_mask() -> None:
    mask = suffix_attention_mask(torch.tensor([3, 1]), torch.tensor([0, 1, 1]), 3, 2)
    assert mask.shape == (3, 1, 2, 5)
    assert mask[0, 0].int().tolist() == [[1, 1, 1, 1, 0], [1, 1, 1, 1, 1]]
    assert mask[1, 0].int().tolist() == [[1, 0, 0, 1, 0], [1, 0, 0, 1, 1]]
    assert torch.equal(mask[1], mask[2])
