"""The teacher pass: the frozen backbone reads every training and validation sample once.

For each sample we keep what Phase 1 needs and nothing else: the final hidden state at the answer
position (`hidden_states[-1][:, -1]`, i.e. the normed last layer at the last prompt token) and the
LM head's logits of the score tokens "1".."5" (ids from the tokenizer). They are written to storage
as safetensors shards under

    training/cache/<release>/<backbone fingerprint>/<prompt version>/<split>/shard-00000.safetensors

Shards are the teacher's checkpoints: a killed pass resumes at the first missing shard, and a
`complete.json` marker (with a digest of the candidate ids, in order) lets a later run on the same
release, backbone and prompt reuse the whole cache without touching the backbone.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import torch

from training_bridge.rigel.data import ExampleLoader, ReleaseRecord
from training_bridge.rigel.distributed import Distributed
from training_bridge.rigel.prompts import DEFAULT_LAYOUT
from training_bridge.rigel.score_logits import score_token_logits
from training_bridge.rigel.store import Store

CACHE_ROOT = "training/cache"
ProgressCallback = Callable[[int, int], None]  # (samples done, samples total)


@dataclass
class TeacherOutputs:
    hidden: torch.Tensor  # [N, H], the backbone's dtype
    score_logits: torch.Tensor  # [N, 5], float32
    candidate_ids: list[str]


# --- cache identity ---------------------------------------------------------------------------


def backbone_fingerprint(backbone: Any) -> str:
    """A short digest of what the backbone computes: its name, configuration, score token ids and
    a probe of every weight tensor (first elements), so a different checkpoint or random seed
    never reuses another backbone's cache."""
    digest = hashlib.sha256()
    digest.update(str(backbone.name).encode())
    digest.update(backbone.model.config.to_json_string(use_diff=False).encode())
    digest.update(json.dumps(list(backbone.score_token_ids)).encode())
    with torch.no_grad():
        for name, tensor in sorted(backbone.model.state_dict().items()):
            digest.update(name.encode())
            probe = tensor.reshape(-1)[:64].detach().to("cpu", torch.float32)
            digest.update(probe.numpy().tobytes())
    return digest.hexdigest()[:16]


def prompt_version(
    *,
    reference_free: bool,
    frames: int,
    frame_pixels: int = 0,
    images: bool = False,
    layout: str = DEFAULT_LAYOUT,
) -> str:
    """Digest of the prompt wording in its ``layout`` (any edit gives a new cache), the setting, the frame count and
    the per-frame pixel budget (named only when set, so the default's caches keep their keys).
    ``images``: the release holds still images, so the image prompt's wording enters the digest
    too (a release of videos only keeps its key)."""
    from training_bridge.rigel import prompts
    from training_bridge.rigel.modality import IMAGE, VIDEO

    def sample(modality: str) -> str:
        return prompts.prompt_text(
            references=["<reference one>", "<reference two>"],
            candidate="<candidate>",
            reference_free=reference_free,
            modality=modality,
            layout=layout,
        )

    declared = str(getattr(prompts, "PROMPT_VERSION", ""))
    text = declared + "\n" + sample(VIDEO)
    if images:
        text += "\n" + sample(IMAGE)
    digest = hashlib.sha256(text.encode()).hexdigest()[:10]
    budget = f"-px{frame_pixels}" if frame_pixels else ""
    return f"p{digest}-{'free' if reference_free else 'ref'}-f{frames}{budget}"


def cache_prefix(*, release_key: str, fingerprint: str, version: str) -> str:
    return f"{CACHE_ROOT}/{release_key}/{fingerprint}/{version}"


def ids_digest(candidate_ids: Sequence[str]) -> str:
    return hashlib.sha256("\n".join(candidate_ids).encode()).hexdigest()


# --- forward ----------------------------------------------------------------------------------


def answer_position_outputs(
    backbone: Any, batch: dict[str, torch.Tensor]
) -> tuple[torch.Tensor, torch.Tensor]:
    """(final hidden state at position -1 [B, H], LM-head logits of "1".."5" [B, 5]).

    Runs the decoder without the LM head (the base model's `last_hidden_state` is
    `hidden_states[-1]`), then applies only the five rows of the LM head that matter instead of
    the whole vocabulary.
    """
    outputs = backbone.model.model(**batch, use_cache=False)
    hidden = outputs.last_hidden_state[:, -1]
    score_logits = score_token_logits(backbone, hidden)
    return hidden, score_logits


# --- the pass ---------------------------------------------------------------------------------


def shard_key(prefix: str, split: str, index: int) -> str:
    return f"{prefix}/{split}/shard-{index:05d}.safetensors"


def marker_key(prefix: str, split: str) -> str:
    return f"{prefix}/{split}/complete.json"


def cached_split_is_complete(store: Store, prefix: str, split: str, ids: Sequence[str]) -> bool:
    key = marker_key(prefix, split)
    if not store.exists(key):
        return False
    marker = json.loads(store.read_bytes(key))
    return marker.get("ids_sha256") == ids_digest(ids) and marker.get("count") == len(ids)


def load_split(store: Store, prefix: str, split: str) -> TeacherOutputs:
    from safetensors.torch import load as load_safetensors

    marker = json.loads(store.read_bytes(marker_key(prefix, split)))
    hidden_parts, logit_parts, ids = [], [], []
    for index in range(int(marker["shards"])):
        data = store.read_bytes(shard_key(prefix, split, index))
        tensors = load_safetensors(data)
        hidden_parts.append(tensors["hidden"])
        logit_parts.append(tensors["score_logits"])
        ids.extend(json.loads(_metadata(data)["candidate_ids"]))
    return TeacherOutputs(
        hidden=torch.cat(hidden_parts), score_logits=torch.cat(logit_parts), candidate_ids=ids
    )


def _metadata(data: bytes) -> dict[str, str]:
    # safetensors: 8-byte little-endian header length, then the JSON header with __metadata__.
    length = int.from_bytes(data[:8], "little")
    header = json.loads(data[8 : 8 + length])
    return dict(header.get("__metadata__") or {})


@torch.no_grad()
def run_teacher_split(
    *,
    backbone: Any,
    loader: ExampleLoader,
    records: Sequence[ReleaseRecord],
    store: Store,
    prefix: str,
    split: str,
    reference_free: bool,
    batch_size: int,
    shard_size: int,
    on_progress: ProgressCallback | None = None,
    dist: Distributed | None = None,
    log: Callable[[str], None] | None = None,
    engine: Any | None = None,
) -> int:
    """Compute and store the missing shards of one split; returns how many samples were run
    through the backbone (0 when the cache was complete). With `engine` (a
    `training_bridge.rigel.engine.ScoringEngine`) the forward runs through it: same numbers,
    decoding in worker processes and a faster GPU path."""
    dist = dist or Distributed()
    ids = [record.candidate_id for record in records]
    if cached_split_is_complete(store, prefix, split, ids):
        return 0
    backbone.model.eval()
    total = len(records)
    shard_count = (total + shard_size - 1) // shard_size
    computed = 0
    for index in range(shard_count):
        start, end = index * shard_size, min(total, (index + 1) * shard_size)
        key = shard_key(prefix, split, index)
        if store.exists(key) and _shard_matches(store.read_bytes(key), ids[start:end]):
            if on_progress:
                on_progress(end, total)
            continue
        positions = dist.shard(list(range(start, end)))
        examples = [records[i] for i in positions]
        if engine is not None:
            local = _engine_outputs(engine, loader, examples, positions)
        else:
            local = _backbone_outputs(
                backbone, loader, examples, positions, reference_free, batch_size
            )
        computed += len(local)
        gathered = [item for part in dist.gather_objects(local) for item in part]
        if dist.is_main:
            _store_shard(store, key, gathered, ids, start, end, f"teacher shard {index} of {split}")
        dist.barrier()
        if on_progress:
            on_progress(end, total)
        if log:
            log(f"teacher {split}: shard {index + 1}/{shard_count} ({end}/{total} samples)")
    if dist.is_main:
        marker = {"count": total, "shards": shard_count, "ids_sha256": ids_digest(ids)}
        store.put_bytes(marker_key(prefix, split), json.dumps(marker, sort_keys=True).encode())
    dist.barrier()
    return int(dist.all_reduce_sum(float(computed)))


TeacherRow = tuple[int, torch.Tensor, torch.Tensor]  # (record position, hidden, score logits)


def _engine_outputs(
    engine: Any, loader: ExampleLoader, examples: list[ReleaseRecord], positions: list[int]
) -> list[TeacherRow]:
    if not positions:
        return []
    output = engine.run(loader.examples(examples))
    hidden_all = torch.from_numpy(output.hidden)
    logits_all = torch.from_numpy(output.score_logits)
    return [(p, hidden_all[k], logits_all[k]) for k, p in enumerate(positions)]


def _backbone_outputs(
    backbone: Any,
    loader: ExampleLoader,
    examples: list[ReleaseRecord],
    positions: list[int],
    reference_free: bool,
    batch_size: int,
) -> list[TeacherRow]:
    from training_bridge.rigel.inputs import build_batch

    local: list[TeacherRow] = []
    for first in range(0, len(positions), batch_size):
        batch = build_batch(
            loader.examples(examples[first : first + batch_size]),
            backbone,
            reference_free=reference_free,
            device=backbone.device,
        )
        hidden, logits = answer_position_outputs(backbone, batch)
        for row, position in enumerate(positions[first : first + batch_size]):
            local.append((position, hidden[row].cpu(), logits[row].cpu()))
    return local


def _store_shard(
    store: Store,
    key: str,
    gathered: list[TeacherRow],
    ids: Sequence[str],
    start: int,
    end: int,
    name: str,
) -> None:
    """One shard of every process's rows, in record order, with its candidate ids."""
    from safetensors.torch import save as save_safetensors

    gathered.sort(key=lambda item: item[0])
    if [item[0] for item in gathered] != list(range(start, end)):
        raise RuntimeError(f"{name} is incomplete")
    tensors = {
        "hidden": torch.stack([item[1] for item in gathered]).contiguous(),
        "score_logits": torch.stack([item[2] for item in gathered]).float().contiguous(),
    }
    metadata = {"candidate_ids": json.dumps(ids[start:end]), "first": str(start)}
    store.put_bytes(key, save_safetensors(tensors, metadata=metadata))


def _shard_matches(data: bytes, ids: Sequence[str]) -> bool:
    try:
        return json.loads(_metadata(data).get("candidate_ids", "[]")) == list(ids)
    except (ValueError, json.JSONDecodeError):
        return False
