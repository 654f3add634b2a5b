"""A tiny random LLaVA (EXPERT's model family: CLIP vision tower, projector, Llama decoder) and a
tiny random Llama causal LM, each saved as a transformers checkpoint with a tokenizer built
locally (`training_bridge.rigel.backbone.build_tokenizer("tiny")`, byte-level BPE with a chat
template), for the judge and CaptionQA plug-ins. Nothing is downloaded."""

from __future__ import annotations

from pathlib import Path

IMAGE_TOKEN = "<image>"
# The rigel tiny tokenizer's chat layout, with LLaVA's "<image>" marker for every image part.
CHAT_TEMPLATE = (
    "{%- for message in messages -%}{{- '<|im_start|>' + message['role'] + '\n' -}}"
    "{%- if message['content'] is string -%}{{- message['content'] -}}"
    "{%- else -%}{%- for part in message['content'] -%}"
    "{%- if part['type'] == 'image' -%}{{- '<image>\n' -}}{%- else -%}{{- part['text'] -}}"
    "{%- endif -%}{%- endfor -%}{%- endif -%}{{- '<|im_end|>\n' -}}{%- endfor -%}"
    "{%- if add_generation_prompt -%}{{- '<|im_start|>assistant\n' -}}{%- endif -%}"
)


def _tokenizer():  # type: ignore[no-untyped-def]
    from training_bridge.rigel.backbone import build_tokenizer

    tokenizer = build_tokenizer("tiny")
    tokenizer.add_tokens([IMAGE_TOKEN], special_tokens=True)
    tokenizer.chat_template = CHAT_TEMPLATE
    return tokenizer


def _llama(tokenizer):  # type: ignore[no-untyped-def]
    from transformers import LlamaConfig

    return LlamaConfig(
        vocab_size=len(tokenizer),
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=2,
        num_key_value_heads=1,
        max_position_embeddings=4096,
        pad_token_id=tokenizer.pad_token_id,
        eos_token_id=tokenizer.eos_token_id,
        bos_token_id=None,
    )


def save_tiny_llava(directory: Path, *, seed: int = 0) -> Path:
    """A 2-layer LLaVA (32x32 images, 4 patches + CLS, vision width 32, text width 64)."""
    import torch
    from transformers import (
        CLIPImageProcessor,
        CLIPVisionConfig,
        LlavaConfig,
        LlavaForConditionalGeneration,
        LlavaProcessor,
    )

    tokenizer = _tokenizer()
    processor = LlavaProcessor(
        image_processor=CLIPImageProcessor(
            size={"shortest_edge": 32}, crop_size={"height": 32, "width": 32}
        ),
        tokenizer=tokenizer,
        chat_template=CHAT_TEMPLATE,
        patch_size=16,
        vision_feature_select_strategy="default",
        num_additional_image_tokens=1,
    )
    config = LlavaConfig(
        vision_config=CLIPVisionConfig(
            hidden_size=32,
            intermediate_size=64,
            num_hidden_layers=2,
            num_attention_heads=2,
            image_size=32,
            patch_size=16,
            projection_dim=32,
        ),
        text_config=_llama(tokenizer),
        image_token_id=tokenizer.convert_tokens_to_ids(IMAGE_TOKEN),  # type: ignore[call-arg]
        vision_feature_layer=-1,
        vision_feature_select_strategy="default",
    )
    torch.manual_seed(seed)
    model = LlavaForConditionalGeneration(config).eval()
    directory.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(directory)
    processor.save_pretrained(directory)
    return directory


def save_tiny_lm(directory: Path, *, seed: int = 0, chat: bool = True) -> Path:
    """A 2-layer Llama causal LM with the tiny tokenizer (with or without a chat template)."""
    import torch
    from transformers import LlamaForCausalLM

    tokenizer = _tokenizer()
    if not chat:
        tokenizer.chat_template = None
    torch.manual_seed(seed)
    model = LlamaForCausalLM(_llama(tokenizer)).eval()
    directory.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(directory)
    tokenizer.save_pretrained(directory)
    return directory
