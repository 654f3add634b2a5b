"""Convert an L-CLIP checkpoint (seed 001, Li et al.: CLIP compressed by weight multiplexing and a
factorised word embedding) into the transformers `CLIPModel` checkpoint that the L-CLIPScore
plug-in loads (`lclip_model`). A plain OpenAI-CLIP state dict is the special case without either
(one repetition per block, a full embedding table), so the same converter turns the PAC-S
(`clip_ViT-B-32.pth`) and FactVC (`factvc_video.pth`) state dicts into `pacs_model` /
`factvc_model` checkpoints, and with `lora_scaling` the PAC-S++ one (its LoRA adapters folded
into the weights, `merge_lora`). Any weight it does not know is refused by name, never dropped.

The source layout (the authors' DistillCLIP code, ForJadeForest/DistillCLIP at 9ea87f2:
`model/component/_common.py` for the OpenAI-CLIP module names, `weight_share_model.py` for the
multiplexing; seed 001 §III-A and Fig. 2 for the shapes):

- OpenAI-CLIP names: `token_embedding`, `positional_embedding`, `transformer.resblocks.{s}.…`,
  `ln_final`, `text_projection` for the text tower; `visual.class_embedding`, `visual.conv1`,
  `visual.positional_embedding`, `visual.ln_pre`, `visual.transformer.resblocks.{s}.…`,
  `visual.ln_post`, `visual.proj` for the vision tower; inside a block `attn.in_proj_weight|bias`
  (q, k, v stacked), `attn.out_proj`, `ln_1`, `ln_2`, `mlp.c_fc`, `mlp.c_proj`, QuickGELU;
  any prefix before them (e.g. `student.text_encoder.`) is found and dropped.
- Weight multiplexing (seed 001 §III-A: "each two Transformer blocks multiplex one shared
  block"; MiniViT's `RepeatedModuleList`): a shared block s holds its attention and MLP weights
  once and its layer norms per repetition, `ln_1.instances.{r}` / `ln_2.instances.{r}`; virtual
  layer s·R + r runs the shared weights with repetition r's layer norms. So the vision tower's 3
  shared blocks are its 6 layers and the text tower's 2 are its 4 (Fig. 2). A block without
  `instances` is one plain layer.
- Factorised word embedding (seed 001 §III-A: 49408 × 768 decomposed into 49408 × 256 and
  256 × 768; DistillCLIP `text_encoder.py`: `nn.Sequential(nn.Embedding(V, 256),
  nn.Linear(256, d))`): `token_embedding.0.weight` (V, k), `token_embedding.1.weight` (d, k) and
  `.bias` (d); the full table is E = A Wᵀ + b, exactly what the two modules compute per token.

Refused (the converter raises, naming them): MiniViT's attention transformations
(`attn.conv_l` / `attn.conv_w`, 1×1 convolutions mixing heads before/after the softmax), which no
plain CLIP attention can express; relative position encodings (`rpe_*`). Dropped, being
distillation-only: `embedding_projection`, `hidden_projection`, the teacher's weights.

The tokenizer and image processor are CLIP's (L-CLIP keeps CLIP's BPE vocabulary and
preprocessing): they are copied from `tokenizer_from`, a transformers CLIP checkpoint.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypedDict

TEXT_ROOT = "token_embedding."
VISION_ROOT = "visual.class_embedding"
DISTILLATION_ONLY = ("embedding_projection.", "hidden_projection.")
UNSUPPORTED = ("attn.conv_l.", "attn.conv_w.", "rpe_q", "rpe_k", "rpe_v")


class ConversionError(ValueError):
    """The checkpoint is not in a layout this converter can turn into a plain CLIP."""


class TextConfig(TypedDict):
    vocab_size: int
    hidden_size: int
    intermediate_size: int
    num_hidden_layers: int
    num_attention_heads: int
    max_position_embeddings: int
    hidden_act: str


class VisionConfig(TypedDict):
    hidden_size: int
    intermediate_size: int
    num_hidden_layers: int
    num_attention_heads: int
    image_size: int
    patch_size: int
    hidden_act: str


class ClipConfig(TypedDict):
    """The arguments of transformers' `CLIPConfig` for the converted towers."""

    projection_dim: int
    text_config: TextConfig
    vision_config: VisionConfig


@dataclass(frozen=True)
class Conversion:
    state_dict: dict[str, Any]  # transformers key -> torch tensor
    config: ClipConfig
    text_layers: int
    vision_layers: int
    factorised_embedding: bool


def _prefix(keys: list[str], marker: str, what: str) -> str:
    found = sorted({key[: key.index(marker)] for key in keys if marker in key}, key=len)
    if not found:
        raise ConversionError(f"no {what} found (no key containing {marker!r})")
    return found[0]


def _blocks(state: Mapping[str, Any], root: str) -> list[dict[str, Any]]:
    """The virtual layers of a (possibly multiplexed) `transformer.resblocks` stack, in order:
    each a dict of OpenAI block names (`ln_1.weight`, `attn.in_proj_weight`, ...) to tensors."""
    pattern = re.compile(re.escape(root) + r"transformer\.resblocks\.(\d+)\.(.+)$")
    shared: dict[int, dict[str, Any]] = {}
    for key, value in state.items():
        match = pattern.match(key)
        if match:
            shared.setdefault(int(match.group(1)), {})[match.group(2)] = value
    if not shared:
        raise ConversionError(f"no transformer blocks under {root!r}")
    if sorted(shared) != list(range(len(shared))):
        raise ConversionError(f"blocks under {root!r} are not numbered 0..n-1")
    layers = []
    for index in range(len(shared)):
        block = shared[index]
        bad = sorted(name for name in block if name.startswith(UNSUPPORTED))
        if bad:
            raise ConversionError(
                f"block {index} under {root!r} uses {', '.join(bad)}: MiniViT attention "
                "transformations / relative positions have no plain-CLIP equivalent"
            )
        repeats = sorted(
            {int(m.group(1)) for n in block if (m := re.match(r"ln_1\.instances\.(\d+)\.", n))}
        )
        if not repeats:
            layers.append(block)
            continue
        for repeat in repeats:
            layer = {n: v for n, v in block.items() if ".instances." not in n}
            for norm in ("ln_1", "ln_2"):
                for part in ("weight", "bias"):
                    key = f"{norm}.instances.{repeat}.{part}"
                    if key not in block:
                        raise ConversionError(f"block {index} under {root!r} lacks {key}")
                    layer[f"{norm}.{part}"] = block[key]
            layers.append(layer)
    return layers


BLOCK_KEYS = {
    f"{name}.{part}"
    for name in ("ln_1", "ln_2", "attn.out_proj", "mlp.c_fc", "mlp.c_proj")
    for part in ("weight", "bias")
} | {"attn.in_proj_weight", "attn.in_proj_bias"}


# LoRA adapters of PAC-S++ (aimagelab/pacscore `models/custom_loralib/layers.py`): per weight W an
# A (r, in) and B (out, r), applied as x Aᵀ Bᵀ · scaling (l.154, l.590), scaling = lora_alpha / r.
LORA_TARGETS = {
    "attn.in_proj_weight": ("attn.in_proj_weight_lora_A", "attn.in_proj_weight_lora_B"),
    "attn.out_proj.weight": ("attn.out_proj.lora_A", "attn.out_proj.lora_B"),
    "mlp.c_fc.weight": ("mlp.c_fc.lora_A", "mlp.c_fc.lora_B"),
    "mlp.c_proj.weight": ("mlp.c_proj.lora_A", "mlp.c_proj.lora_B"),
}


def merge_lora(layer: Mapping[str, Any], scaling: float) -> dict[str, Any]:
    """The block's weights with every LoRA pair folded in: W + scaling · B A."""
    merged = dict(layer)
    for weight, (name_a, name_b) in LORA_TARGETS.items():
        if name_a in merged or name_b in merged:
            low, up = merged.pop(name_a), merged.pop(name_b)
            delta = (up.double() @ low.double()) * scaling
            merged[weight] = (merged[weight].double() + delta).to(merged[weight].dtype)
    return merged


def _layer_keys(
    target: str, layer: Mapping[str, Any], lora_scaling: float | None = None
) -> dict[str, Any]:
    if lora_scaling is not None:
        layer = merge_lora(layer, lora_scaling)
    unknown = sorted(set(layer) - BLOCK_KEYS)
    if unknown:
        hint = (
            " (LoRA adapters: give lora_scaling = lora_alpha / r to merge them)"
            if any("lora" in name for name in unknown)
            else ""
        )
        raise ConversionError(f"{target}: unexpected weights {', '.join(unknown)}{hint}")
    query, key, value = layer["attn.in_proj_weight"].chunk(3, dim=0)
    query_bias, key_bias, value_bias = layer["attn.in_proj_bias"].chunk(3, dim=0)
    return {
        f"{target}.self_attn.q_proj.weight": query,
        f"{target}.self_attn.k_proj.weight": key,
        f"{target}.self_attn.v_proj.weight": value,
        f"{target}.self_attn.q_proj.bias": query_bias,
        f"{target}.self_attn.k_proj.bias": key_bias,
        f"{target}.self_attn.v_proj.bias": value_bias,
        f"{target}.self_attn.out_proj.weight": layer["attn.out_proj.weight"],
        f"{target}.self_attn.out_proj.bias": layer["attn.out_proj.bias"],
        f"{target}.layer_norm1.weight": layer["ln_1.weight"],
        f"{target}.layer_norm1.bias": layer["ln_1.bias"],
        f"{target}.layer_norm2.weight": layer["ln_2.weight"],
        f"{target}.layer_norm2.bias": layer["ln_2.bias"],
        f"{target}.mlp.fc1.weight": layer["mlp.c_fc.weight"],
        f"{target}.mlp.fc1.bias": layer["mlp.c_fc.bias"],
        f"{target}.mlp.fc2.weight": layer["mlp.c_proj.weight"],
        f"{target}.mlp.fc2.bias": layer["mlp.c_proj.bias"],
    }


def _required(state: Mapping[str, Any], key: str) -> Any:
    if key not in state:
        raise ConversionError(f"missing {key}")
    return state[key]


def _token_embedding(state: Mapping[str, Any], text: str) -> tuple[Any, bool]:
    """(the token embedding, whether L-CLIP factorised it): a factorised embedding is the product
    of its low-rank table and its up-projection (E = A Wᵀ + b), computed in float64."""
    factorised = f"{text}token_embedding.0.weight" in state
    if not factorised:
        return _required(state, f"{text}token_embedding.weight"), False
    low_rank = _required(state, f"{text}token_embedding.0.weight")
    up = _required(state, f"{text}token_embedding.1.weight")
    up_bias = state.get(f"{text}token_embedding.1.bias")
    embedding = low_rank.double() @ up.double().T  # E = A Wᵀ + b, in float64 then back
    if up_bias is not None:
        embedding = embedding + up_bias.double()
    return embedding.to(up.dtype), True


def _clip_config(
    text_layers: Sequence[Mapping[str, Any]],
    vision_layers: Sequence[Mapping[str, Any]],
    *,
    embedding: Any,
    text_projection: Any,
    text_positions: int,
    image_size: int,
    patch_size: int,
    vision_width: int,
    text_heads: int | None,
    vision_heads: int | None,
) -> ClipConfig:
    """The transformers `CLIPConfig` (its arguments) of the converted towers."""
    text_width = int(embedding.shape[1])
    return ClipConfig(
        projection_dim=int(text_projection.shape[1]),
        text_config=TextConfig(
            vocab_size=int(embedding.shape[0]),
            hidden_size=text_width,
            intermediate_size=int(text_layers[0]["mlp.c_fc.weight"].shape[0]),
            num_hidden_layers=len(text_layers),
            num_attention_heads=text_heads or max(text_width // 64, 1),
            max_position_embeddings=text_positions,
            hidden_act="quick_gelu",
        ),
        vision_config=VisionConfig(
            hidden_size=vision_width,
            intermediate_size=int(vision_layers[0]["mlp.c_fc.weight"].shape[0]),
            num_hidden_layers=len(vision_layers),
            num_attention_heads=vision_heads or max(vision_width // 64, 1),
            image_size=image_size,
            patch_size=patch_size,
            hidden_act="quick_gelu",
        ),
    )


def convert_lclip_state_dict(
    state: Mapping[str, Any],
    *,
    text_heads: int | None = None,
    vision_heads: int | None = None,
    lora_scaling: float | None = None,
) -> Conversion:
    """The transformers `CLIPModel` state dict and config of an L-CLIP state dict (torch tensors).

    Heads cannot be read from the weights: by default width / 64, as every OpenAI CLIP.
    `lora_scaling` (lora_alpha / r; PAC-S++: 1 / 4, `lora_alpha` defaults to 1 and
    `compute_correlations_pac++.py` loads with r = 4) folds LoRA adapters into their weights; the
    adapters must not be merged already (custom_loralib merges a `Linear`'s into its weight on
    `eval()` without saving that it did, so a state dict saved after `eval()` would be merged twice)."""
    import torch

    state = {
        key: value
        for key, value in state.items()
        if not any(part in key for part in DISTILLATION_ONLY)
    }
    keys = list(state)
    text = _prefix(keys, TEXT_ROOT, "text tower")
    vision = _prefix(keys, VISION_ROOT, "vision tower") + "visual."

    embedding, factorised = _token_embedding(state, text)
    text_layers = _blocks(state, text)
    vision_layers = _blocks(state, vision)
    text_projection = _required(state, f"{text}text_projection")
    vision_projection = _required(state, f"{vision}proj")
    patch = _required(state, f"{vision}conv1.weight")
    positions = _required(state, f"{vision}positional_embedding")
    patch_size = int(patch.shape[-1])
    grid = round((positions.shape[0] - 1) ** 0.5)
    if grid * grid + 1 != positions.shape[0]:
        raise ConversionError("the vision positional embedding is not a square grid plus [CLS]")
    if text_projection.shape[1] != vision_projection.shape[1]:
        raise ConversionError("the text and vision projections have different widths")

    converted: dict[str, Any] = {
        "text_model.embeddings.token_embedding.weight": embedding,
        "text_model.embeddings.position_embedding.weight": _required(
            state, f"{text}positional_embedding"
        ),
        "text_model.final_layer_norm.weight": _required(state, f"{text}ln_final.weight"),
        "text_model.final_layer_norm.bias": _required(state, f"{text}ln_final.bias"),
        "text_projection.weight": text_projection.T.contiguous(),
        "vision_model.embeddings.class_embedding": _required(state, f"{vision}class_embedding"),
        "vision_model.embeddings.patch_embedding.weight": patch,
        "vision_model.embeddings.position_embedding.weight": positions,
        "vision_model.pre_layrnorm.weight": _required(state, f"{vision}ln_pre.weight"),
        "vision_model.pre_layrnorm.bias": _required(state, f"{vision}ln_pre.bias"),
        "vision_model.post_layernorm.weight": _required(state, f"{vision}ln_post.weight"),
        "vision_model.post_layernorm.bias": _required(state, f"{vision}ln_post.bias"),
        "visual_projection.weight": vision_projection.T.contiguous(),
        "logit_scale": next(
            (v for k, v in state.items() if k.split(".")[-1] == "logit_scale"),
            torch.tensor(4.6052),  # only the contrastive logits use it; no metric reads it
        ),
    }
    for index, layer in enumerate(text_layers):
        converted.update(_layer_keys(f"text_model.encoder.layers.{index}", layer, lora_scaling))
    for index, layer in enumerate(vision_layers):
        converted.update(_layer_keys(f"vision_model.encoder.layers.{index}", layer, lora_scaling))
    converted = {key: value.detach().clone().contiguous() for key, value in converted.items()}
    config = _clip_config(
        text_layers,
        vision_layers,
        embedding=embedding,
        text_projection=text_projection,
        text_positions=int(_required(state, f"{text}positional_embedding").shape[0]),
        image_size=grid * patch_size,
        patch_size=patch_size,
        vision_width=int(patch.shape[0]),
        text_heads=text_heads,
        vision_heads=vision_heads,
    )
    return Conversion(converted, config, len(text_layers), len(vision_layers), factorised)


def convert_lclip_checkpoint(
    source: str | Path,
    destination: str | Path,
    *,
    tokenizer_from: str | Path,
    text_heads: int | None = None,
    vision_heads: int | None = None,
    lora_scaling: float | None = None,
) -> Conversion:
    """Read an L-CLIP `.pth`/`.ckpt` (a state dict, or {"state_dict": ...}), write a transformers
    CLIP checkpoint (config, weights, CLIP's tokenizer and image processor from `tokenizer_from`)
    to `destination`, and say what was converted."""
    import torch
    from transformers import AutoImageProcessor, AutoTokenizer, CLIPConfig, CLIPModel

    loaded = torch.load(Path(source), map_location="cpu", weights_only=True)
    state = loaded.get("state_dict", loaded) if isinstance(loaded, dict) else None
    if not isinstance(state, dict):
        raise ConversionError(f"{source} holds no state dict")
    tokenizer = AutoTokenizer.from_pretrained(str(tokenizer_from), local_files_only=True)
    processor = AutoImageProcessor.from_pretrained(str(tokenizer_from), local_files_only=True)
    conversion = convert_lclip_state_dict(
        state, text_heads=text_heads, vision_heads=vision_heads, lora_scaling=lora_scaling
    )
    config = CLIPConfig(
        text_config={
            **conversion.config["text_config"],
            "bos_token_id": tokenizer.bos_token_id,
            "eos_token_id": tokenizer.eos_token_id,
            "pad_token_id": tokenizer.pad_token_id,
        },
        vision_config=dict(conversion.config["vision_config"]),
        projection_dim=conversion.config["projection_dim"],
    )
    model = CLIPModel(config)
    missing, unexpected = model.load_state_dict(conversion.state_dict, strict=False)
    missing = [key for key in missing if not key.endswith("position_ids")]
    if missing or unexpected:
        raise ConversionError(
            f"the converted weights do not fit CLIPModel: missing {missing}, unexpected {unexpected}"
        )
    output = Path(destination)
    output.mkdir(parents=True, exist_ok=True)
    model.eval().save_pretrained(output)
    tokenizer.save_pretrained(output)
    processor.save_pretrained(output)
    return conversion
