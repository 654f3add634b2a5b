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


def test_pack_suffixes_puts_a_clips_candidates_in_one_row() -> None:
    from training_bridge.rigel.engine.prefix import pack_suffixes

    # clip 0: candidates of 2 and 3 tokens; clip 1: one candidate of 1 token
    ids = torch.tensor([[11, 12, 0], [21, 22, 23], [31, 0, 0]])
    positions = torch.stack([torch.tensor([[5, 6, 7], [5, 6, 7], [3, 4, 5]])] * 3)
    packed = pack_suffixes(
        ids, positions, torch.tensor([2, 3, 1]), torch.tensor([0, 0, 1]), torch.tensor([4, 2]),
        4, 0,
    )  # fmt: skip
    assert packed.ids.tolist() == [[11, 12, 21, 22, 23], [31, 0, 0, 0, 0]]
    # each token keeps its own position: the second candidate restarts at the prefix's end
    assert packed.positions[0].tolist() == [[5, 6, 5, 6, 7], [3, 0, 0, 0, 0]]
    assert packed.last.tolist() == [1, 4, 5]
    mask = packed.mask[:, 0].int()
    assert mask.shape == (2, 5, 9)
    # a token of the second candidate: the clip's 4 prefix tokens, then its own tokens causally
    assert mask[0, 3].tolist() == [1, 1, 1, 1, 0, 0, 1, 1, 0]
    assert mask[0, 1].tolist() == [1, 1, 1, 1, 1, 1, 0, 0, 0]
    # clip 1's prefix has 2 real tokens; its padding slots see the prefix only (never empty)
    assert mask[1, 0].tolist() == [1, 1, 0, 0, 1, 0, 0, 0, 0]
    assert mask[1, 3].tolist() == [1, 1, 0, 0, 0, 0, 0, 0, 0]


def test_pack_suffixes_with_each_candidates_own_prefix_columns() -> None:
    """``prefix_visible``: a candidate's slots see its own prefix columns (the two-level path:
    its clip's shared part and its protocol's part), the empty slots their row's real prefix."""
    from training_bridge.rigel.engine.prefix import pack_suffixes

    ids = torch.tensor([[11, 12], [21, 0]])
    positions = torch.zeros((3, 2, 2), dtype=torch.long)
    visible = torch.tensor([[1, 1, 0, 0, 1], [1, 0, 1, 1, 0]], dtype=torch.bool)
    packed = pack_suffixes(
        ids, positions, torch.tensor([2, 1]), torch.tensor([0, 0]), torch.tensor([2]), 5, 0,
        prefix_visible=visible,
    )  # fmt: skip
    assert packed.offset.tolist() == [0, 2]
    mask = packed.mask[0, 0].int()
    assert mask.tolist() == [
        [1, 1, 0, 0, 1, 1, 0, 0],
        [1, 1, 0, 0, 1, 1, 1, 0],
        [1, 0, 1, 1, 0, 0, 0, 1],
    ]
