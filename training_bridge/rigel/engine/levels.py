"""Two-level prefixes: one clip under several prompt settings (issue 29, point 2).

Scored "together" (`benchmark.ProtocolScorer.score_together`), a clip comes once per prompt
setting (reference-free, 1-ref, all-refs), one group each, and its groups travel as one bundle
(:func:`.prefix.plan_bundles`). Their prompts are the same up to and past the video: the chat
header, the video's tokens and the first words of the text (``prompts.py``: the intros differ
after "...the video shown above"). The single-level path runs each group's whole prefix, so the
language model reads the clip's video tokens once per setting. Here:

1. the **shared part** of each bundle (:func:`.prefix.bundle_cuts`: the groups' common prefix,
   the video in it) runs once, one row per bundle, its keys and values recorded;
2. each group's **own part** of its prefix (the rest of the intro, the references, the question,
   the rubric, the answer format) runs against that cache, the groups of a bundle side by side
   in one row (:func:`.prefix.pack_suffixes`: each part sees the shared part and, causally,
   itself), its keys and values recorded after the shared part's;
3. the **candidates** run against that, packed one row per bundle too: each candidate sees its
   bundle's shared part, its own group's part and, causally, its own tokens.

Every token keeps the M-RoPE position it has in its own whole sequence (the workers compute them
from the whole prompt; the parts are slices of them), so with causal attention this is the same
computation as each sample's whole sequence. Nothing is copied per group or per candidate: each
level's rows read the previous level's cache as it is.

No Django import.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch

from .batches import PreparedBatch
from .prefix import GroupBatch, cache_classes, pack_suffixes, rows_hidden
from .vision_cache import keyed_features


def shares_video(batch: GroupBatch) -> bool:
    """Whether some bundle of the batch holds two groups or more that share their video (else
    the two-level path has nothing to share)."""
    return batch.bundle is not None and int(batch.bundle.max()) + 1 < len(batch.bundle)


def lead_rows(batch: GroupBatch) -> list[int]:
    """The prefix row standing for each bundle (its first group), in bundle order."""
    assert batch.bundle is not None
    first: dict[int, int] = {}
    for row, number in enumerate(batch.bundle.tolist()):
        first.setdefault(number, row)
    return [first[number] for number in range(len(first))]


def shared_batch(batch: GroupBatch, lead: Sequence[int]) -> PreparedBatch:
    """Level 1: the shared part of each bundle, one row per bundle (frames, ids, positions),
    right-padded to the longest (the tokens of a row past its shared part are never read)."""
    assert batch.shared_lengths is not None
    sub = batch.prefix.select(lead)
    cuts = batch.shared_lengths[list(lead)]
    width = int(cuts.max())
    sub.input_ids = sub.input_ids[:, :width]
    sub.positions = sub.positions[:, :, :width]
    sub.lengths = cuts.to(sub.lengths.device, non_blocking=True)
    return sub


def counts(batch: GroupBatch, two_level: bool, merge_size: int) -> dict[str, int]:
    """The language model's tokens of one group batch as the engine executes them (padding
    left out): ``prefix_tokens`` (both levels of the two-level path: ``shared_prefix_tokens``
    once per bundle, then each group's own part), ``suffix_tokens``, ``tokens`` (their sum) and
    ``video_tokens`` (once per bundle on the two-level path, else once per group)."""
    lengths = batch.prefix.lengths.cpu()
    patches = batch.prefix.grids.prod(-1)
    suffix = int(batch.suffix_lengths.sum())
    if two_level:
        assert batch.shared_lengths is not None
        lead = lead_rows(batch)
        shared = int(batch.shared_lengths[lead].sum())
        prefix = shared + int((lengths - batch.shared_lengths).sum())
        video = int(patches[lead].sum()) // merge_size**2
    else:
        shared, prefix, video = 0, int(lengths.sum()), int(patches.sum()) // merge_size**2
    return {
        "prefix_tokens": prefix,
        "shared_prefix_tokens": shared,
        "suffix_tokens": suffix,
        "tokens": prefix + suffix,
        "video_tokens": video,
        "two_level_batches": int(two_level),
    }


def own_parts(batch: GroupBatch) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Level 2's inputs: each group's prefix after its bundle's shared part (ids (G, W),
    positions (3, G, W): the slices of the whole prefix's, right-padded) and their lengths."""
    assert batch.shared_lengths is not None
    prefix = batch.prefix
    device = prefix.input_ids.device
    full = int(prefix.input_ids.shape[1])
    cuts = batch.shared_lengths.to(device, non_blocking=True)
    width = max(1, full - int(batch.shared_lengths.min()))
    columns = (cuts.view(-1, 1) + torch.arange(width, device=device)).clamp(max=full - 1)
    ids = prefix.input_ids.gather(1, columns)
    positions = prefix.positions.gather(2, columns.unsqueeze(0).expand(3, -1, -1))
    return ids, positions, prefix.lengths - cuts


def two_level_hidden(
    engine: Any, batch: GroupBatch, video_keys: Sequence[Any] | None = None
) -> torch.Tensor:
    """The final hidden state at each candidate's last token, in candidate order, through the
    three levels of the module docstring. ``engine``: the :class:`.ScoringEngine` (its vision
    tower and its language model's prefix pass); ``batch`` on the engine's device."""
    assert batch.bundle is not None
    lm = engine.backbone.model.model.language_model
    pad_id = engine.backbone.pad_token_id
    _, cached = cache_classes()
    lead = lead_rows(batch)
    shared = shared_batch(batch, lead)
    keys = [video_keys[row] for row in lead] if video_keys is not None else None
    embeds, deepstack = keyed_features(engine, shared, keys)
    shared_kv = engine.prefix_cache(shared, embeds, deepstack)  # level 1
    shared_width = int(shared.input_ids.shape[1])
    device = shared.lengths.device
    bundle = batch.bundle.to(device, non_blocking=True)
    ids, positions, own_lengths = own_parts(batch)
    own = pack_suffixes(ids, positions, own_lengths, bundle, shared.lengths, shared_width, pad_id)
    cache = cached(lm.config, shared_kv, None, record=True)
    rows_hidden(lm, own.ids, own.positions, own.mask, cache)  # level 2
    width = shared_width + int(own.ids.shape[1])
    columns = torch.arange(width, device=device).view(1, -1)
    group_cuts = shared.lengths.index_select(0, bundle).view(-1, 1)
    start = shared_width + own.offset.view(-1, 1)
    sees = (columns < group_cuts) | (
        (columns >= start) & (columns < start + own_lengths.view(-1, 1))
    )  # (G, width): the bundle's shared part and the group's own part
    candidates = pack_suffixes(
        batch.suffix_ids,
        batch.suffix_positions,
        batch.suffix_lengths,
        bundle.index_select(0, batch.owner),
        shared.lengths,
        width,
        pad_id,
        prefix_visible=sees.index_select(0, batch.owner),
    )
    assert cache.recorded is not None
    states = rows_hidden(
        lm,
        candidates.ids,
        candidates.positions,
        candidates.mask,
        cached(lm.config, cache.recorded, None),
    )  # level 3
    return states.index_select(0, candidates.last)
