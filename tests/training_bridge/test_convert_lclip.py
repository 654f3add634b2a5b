"""`manage.py convert_lclip` on a synthetic L-CLIP checkpoint (the layout of seed 001, built by
`tests/metrics/test_lclip_convert.multiplexed_clip`): the JSON report and a checkpoint that loads."""

from __future__ import annotations

import io
import json

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError

from tests.metrics.test_lclip_convert import multiplexed_clip
from tests.metrics.tiny_clip import save_tiny_clip

torch = pytest.importorskip("torch")


def test_convert_lclip_writes_a_loadable_checkpoint(tmp_path) -> None:  # type: ignore[no-untyped-def]
    from transformers import CLIPModel

    model, state = multiplexed_clip(seed=3)
    torch.save(state, tmp_path / "lclip.pth")
    stdout = io.StringIO()
    call_command(
        "convert_lclip",
        str(tmp_path / "lclip.pth"),
        str(tmp_path / "out"),
        "--tokenizer-from",
        str(save_tiny_clip(tmp_path / "tokenizer")),
        "--text-heads",
        "2",
        "--vision-heads",
        "2",
        "--json",
        stdout=stdout,
    )
    payload = json.loads(stdout.getvalue())
    assert (payload["text_layers"], payload["vision_layers"]) == (4, 4)
    assert payload["factorised_embedding"] is True
    converted = CLIPModel.from_pretrained(tmp_path / "out")
    torch.testing.assert_close(
        converted.text_model.embeddings.token_embedding.weight,
        model.text_model.embeddings.token_embedding.weight,
    )
    with pytest.raises(CommandError, match="No such file"):
        call_command(
            "convert_lclip",
            str(tmp_path / "missing.pth"),
            str(tmp_path / "x"),
            "--tokenizer-from",
            str(tmp_path / "tokenizer"),
        )
