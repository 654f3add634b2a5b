"""`manage.py convert_lclip`: turn an L-CLIP checkpoint (weight-multiplexed blocks, factorised word
embedding; seed 001) — or any OpenAI-layout CLIP state dict, such as PAC-S's or FactVC's — into a
transformers CLIP checkpoint the metric plug-ins load (`lclip_model`, `pacs_model`,
`factvc_model`). See `training_bridge.metrics.lclip_convert`.

    python manage.py convert_lclip /models/l-clip.ckpt /models/l-clip-hf \
        --tokenizer-from /models/clip-vit-base-patch32 --json
"""

from __future__ import annotations

from typing import Any

from common.management.arguments import command_errors
from common.management.base import LepusCommand
from common.management.declared import Arg
from training_bridge.metrics.lclip_convert import ConversionError, convert_lclip_checkpoint


class Command(LepusCommand):
    """Convert an L-CLIP (or OpenAI-layout CLIP: PAC-S, FactVC) checkpoint into a transformers CLIP
    checkpoint for the metric plug-ins."""

    arguments = (
        Arg("source", help="The .pth/.ckpt state dict (or {'state_dict': ...})."),
        Arg("destination", help="Directory to write the converted checkpoint to."),
        Arg(
            "--tokenizer-from",
            required=True,
            help="A transformers CLIP checkpoint (local) whose tokenizer and image processor to copy.",
        ),
        Arg("--text-heads", type=int, help="Text attention heads (width / 64)."),
        Arg("--vision-heads", type=int, help="Vision attention heads (width / 64)."),
        Arg(
            "--lora-scaling",
            type=float,
            help="Fold LoRA adapters into their weights with this lora_alpha / r (PAC-S++: 0.25).",
        ),
    )

    def handle(self, *args: Any, **options: Any) -> None:
        with command_errors(ConversionError, OSError):
            conversion = convert_lclip_checkpoint(
                options["source"],
                options["destination"],
                tokenizer_from=options["tokenizer_from"],
                text_heads=options["text_heads"],
                vision_heads=options["vision_heads"],
                lora_scaling=options["lora_scaling"],
            )
        payload = {
            "destination": options["destination"],
            "text_layers": conversion.text_layers,
            "vision_layers": conversion.vision_layers,
            "factorised_embedding": conversion.factorised_embedding,
            "config": conversion.config,
        }
        self.emit(
            payload,
            human=(
                f"wrote {options['destination']}: {conversion.text_layers} text and "
                f"{conversion.vision_layers} vision layers"
                + (", word embedding re-composed" if conversion.factorised_embedding else "")
            ),
        )
