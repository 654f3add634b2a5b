"""Fast batched inference for Rigel: teacher pass and scoring, from MP4 files or frames.

``ScoringEngine`` computes, for each (video, references, candidate), the final hidden state at the
answer position and the LM-head logits of "1".."5" (the teacher pass), and with a head the score
``s = sum_i p_i * i`` normalised to [0, 1] by ``(s - 1) / 4``. It gives the same numbers as
``build_batch`` + ``model(**batch)`` (tests check it on the tiny model), but:

- CPU work (decoding, tokenisation, M-RoPE positions) runs in DataLoader worker processes, batches
  ahead of the GPU, handed over through shared and pinned memory with non-blocking copies;
- resizing, normalisation and the patch layout run on the GPU for the whole batch at once;
- the vision tower attends within each temporal group with one batched SDPA call (all groups of a
  batch have the same size) instead of one call per group;
- sequences are padded on the RIGHT: with causal attention the real tokens never see the pads, so
  no attention mask is needed and SDPA's flash kernel runs; the answer position of each row is its
  last real token (the public ``build_batch`` stays left-padded);
- the M-RoPE positions come precomputed from the workers (no per-sample loop on the GPU stream);
- only the answer position reaches the LM head, and only the five score rows of it;
- **shared prefixes** (``share_prefix=True``, the default): samples with the same video and the
  same references (in VATEX-EVAL every clip has 6 candidates and the same 9 references) share
  everything before the candidate — frames, vision tower output and the prompt up to the
  candidate. Such a clip is decoded once, its vision tower runs once, and the language model reads
  its prefix once and keeps the keys and values of every layer; the clip's candidates' suffixes
  then run side by side in one row against that cache (packed suffixes: each token keeps its own
  M-RoPE position continuing the prefix's, and a mask lets it see the prefix and, causally, its
  own candidate only), or, with ``pack_suffixes = False``, one row per candidate against a copy of
  the cache. With causal attention this is the same computation as the whole sequence, candidate
  by candidate (tests compare the scores with the per-sample path). Samples alone with their clip
  take the per-sample path. With new runs' prompts (the candidate last, ``prompts.py``) the shared
  prefix runs up to the candidate's own words.
- **two-level prefixes** (``ScoringEngine.two_level_prefix``, off by default; packed suffixes):
  a clip scored under several prompt settings at once (the protocols together) runs the part of
  its prompts they share (the chat header, the video, the first words) through the language model
  once, each setting's own part on top of it, then the candidates (:mod:`.levels`). Its masked
  attention over wide spans costs what the 38 % fewer tokens save on an H200, so it is an option.

The package, by section:

- :mod:`.scoring_engine`: :class:`ScoringEngine` (the run loop and the device side),
  :class:`EngineOutput`, :class:`VisionCache` (Phase 2's cache of vision features);
- :mod:`.loading`: the CPU side in DataLoader workers (datasets, worker environment and start);
- :mod:`.batches`: the batch types of the per-sample path (:class:`~.batches.PreparedBatch`);
- :mod:`.prefix`: shared prefixes (grouping, the group batches, the KV caches, the suffix mask);
- :mod:`.levels`: the two-level prefix (a clip's shared part once for its prompt settings);
- :mod:`.attention`: the vision tower's attention as one batched SDPA call;
- :mod:`.fp8`: FP8 matrix products for the linears (opt-in, ``ScoringEngine(fp8=True)``; bf16
  stays the default until FP8's scores are proven on trained weights);
- :mod:`.flops`: FLOP accounting for the benchmarks.

Callers import the engine from here and the parts from their modules. No Django import.
"""

from __future__ import annotations

from .scoring_engine import EngineOutput, ScoringEngine
from .vision_cache import VisionCache

__all__ = ["EngineOutput", "ScoringEngine", "VisionCache"]
