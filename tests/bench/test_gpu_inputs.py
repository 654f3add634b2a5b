"""A GPU benchmark whose input is missing stops (issue 29): no silent stand-in captions, no
tokenizer trained on the prompts alone; the raw file records the inputs' checksums."""

from __future__ import annotations

import hashlib
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "bench"))

import gpu_rigel  # noqa: E402

from training_bridge.rigel import local_backbones  # noqa: E402


def test_the_scoring_benchmark_stops_without_the_real_captions(monkeypatch, tmp_path):
    monkeypatch.setattr(gpu_rigel, "VATEX_EVAL", tmp_path / "missing.json")
    with pytest.raises(SystemExit, match=r"missing input: .*missing\.json.*--synthetic-captions"):
        gpu_rigel.caption_pool()
    # asked for, the stand-ins are used and the inputs say so
    monkeypatch.setattr(gpu_rigel, "SYNTHETIC_CAPTIONS", True)
    assert len(gpu_rigel.caption_pool()) == 500
    assert gpu_rigel.input_files() == {"vatex_eval": None, "synthetic_captions": True}


def test_the_inputs_are_recorded_with_their_checksum(monkeypatch):
    monkeypatch.setattr(gpu_rigel, "SYNTHETIC_CAPTIONS", False)
    inputs = gpu_rigel.input_files()
    shipped = REPO / "data" / "vatex_eval" / "vid_cans_score_dict.json"
    assert inputs["vatex_eval"]["sha256"] == hashlib.sha256(shipped.read_bytes()).hexdigest()
    assert inputs["vatex_eval"]["path"] == "data/vatex_eval/vid_cans_score_dict.json"
    assert inputs["vatex_eval"]["candidates"] == 6 * inputs["vatex_eval"]["rows"]
    assert len(gpu_rigel.caption_pool()) == inputs["vatex_eval"]["candidates"]


def test_the_local_tokenizer_is_not_built_without_its_caption_corpus(monkeypatch, tmp_path):
    monkeypatch.setattr(local_backbones, "CAPTION_CORPUS", tmp_path / "missing.json")
    with pytest.raises(FileNotFoundError, match=r"caption corpus .* is missing"):
        local_backbones._caption_corpus()
