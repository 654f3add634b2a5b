"""The demo's scene corpus: the shipped files are what the generator makes, the drawn videos show
what the references say, and the generic importer takes the corpus as it is."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from django.conf import settings

from common import media
from datasets_app import demo_scenes
from datasets_app.models import CandidateCaption, Clip, ReferenceCaption

SHIPPED = Path(settings.BASE_DIR) / "data" / "demo_scenes"


def test_shipped_corpus_is_the_generators_output(tmp_path: Path) -> None:
    scenes_path, intended_path = demo_scenes.write_corpus(tmp_path)
    assert scenes_path.read_bytes() == (SHIPPED / "scenes.jsonl").read_bytes()
    assert intended_path.read_bytes() == (SHIPPED / "intended.jsonl").read_bytes()


def test_same_seed_same_corpus_other_seed_other_corpus() -> None:
    assert demo_scenes.corpus_lines(6, 7) == demo_scenes.corpus_lines(6, 7)
    assert demo_scenes.corpus_lines(6, 7) != demo_scenes.corpus_lines(6, 8)


def test_every_scene_has_one_candidate_of_each_flaw_with_its_intended_quality() -> None:
    clips, intended = demo_scenes.corpus_lines()
    assert len(clips) == 24
    assert [clip["clip_id"] for clip in clips[:2]] == ["demo-scene-001", "demo-scene-002"]
    by_id = {record["candidate_id"]: record for record in intended}
    for clip in clips:
        flaws = sorted(by_id[c["id"]]["flaw"] for c in clip["candidates"])
        assert flaws == sorted(demo_scenes.INTENDED)
        texts = [c["text"] for c in clip["candidates"]]
        assert len(set(texts)) == 7, texts  # no two candidates alike
        assert len(clip["references"]) == 3
        exact = next(c["text"] for c in clip["candidates"] if c["id"].endswith(":exact"))
        assert exact not in clip["references"]
    assert by_id["demo-scene:demo-scene-001:broken_grammar"]["fluency"] == 2
    assert by_id["demo-scene:demo-scene-001:unrelated"]["relevance"] == 1


def test_candidate_order_does_not_give_the_quality_away() -> None:
    clips, _ = demo_scenes.corpus_lines()
    positions = [
        [c["id"].rsplit(":", 1)[1] for c in clip["candidates"]].index("exact") for clip in clips
    ]
    assert len(set(positions)) >= 4


def _frame(path: Path, seconds: float) -> np.ndarray:
    import subprocess

    raw = subprocess.run(
        [
            "ffmpeg",
            "-loglevel",
            "error",
            "-ss",
            f"{seconds}",
            "-i",
            str(path),
            "-frames:v",
            "1",
            "-f",
            "rawvideo",
            "-pix_fmt",
            "rgb24",
            "-",
        ],
        capture_output=True,
        check=True,
    ).stdout
    return np.frombuffer(raw, dtype=np.uint8).reshape(demo_scenes.HEIGHT, demo_scenes.WIDTH, 3)


def _box_columns(frame: np.ndarray, colour: str) -> np.ndarray:
    """The x positions of the middle row whose pixel is close to the caption colour."""
    target = np.array([int(colour[2 + i : 4 + i], 16) for i in (0, 2, 4)])
    row = frame[demo_scenes.HEIGHT // 2].astype(int)
    return np.flatnonzero(np.abs(row - target).max(axis=1) < 40)


@pytest.mark.slow
def test_drawn_videos_show_what_the_references_say(tmp_path: Path) -> None:
    scenes = demo_scenes.make_scenes(3)
    written, existing = demo_scenes.render_videos(tmp_path, count=3)
    assert (written, existing) == ([f"{s.clip_id}.mp4" for s in scenes], [])
    info = media.probe(tmp_path / "demo-scene-001.mp4")
    assert (info.width, info.height, info.video_codec) == (426, 240, "h264")
    assert info.duration == pytest.approx(4.0, abs=0.1)

    move, appear, change = scenes
    assert (move.kind, appear.kind, change.kind) == ("move", "appear", "change")
    # The moving square: on the side it comes from at the start, on the other side at the end.
    colour = demo_scenes.COLOURS[move.colour]
    start = _box_columns(_frame(tmp_path / f"{move.clip_id}.mp4", 0.1), colour)
    end = _box_columns(_frame(tmp_path / f"{move.clip_id}.mp4", 3.9), colour)
    assert (
        move.direction == "right"
    )  # the seed's first scene; the check below is for this direction
    assert start.size and end.size and start.mean() < 100 and end.mean() > 326
    # The squares that appear one by one: none at the start, `count` separate ones at the end.
    colour = demo_scenes.COLOURS[appear.colour]
    assert _box_columns(_frame(tmp_path / f"{appear.clip_id}.mp4", 0.1), colour).size == 0
    columns = _box_columns(_frame(tmp_path / f"{appear.clip_id}.mp4", 3.9), colour)
    runs = 1 + int((np.diff(columns) > 1).sum())
    assert runs == appear.count
    # The square that changes colour: first colour early, second colour late, same place.
    early = _frame(tmp_path / f"{change.clip_id}.mp4", 0.5)
    late = _frame(tmp_path / f"{change.clip_id}.mp4", 3.5)
    assert _box_columns(early, demo_scenes.COLOURS[change.colour]).size > 30
    assert _box_columns(late, demo_scenes.COLOURS[change.second_colour]).size > 30
    assert _box_columns(late, demo_scenes.COLOURS[change.colour]).size == 0


@pytest.mark.django_db(transaction=True)
def test_the_generic_importer_takes_the_shipped_corpus() -> None:
    from datasets_app.services.imports import candidates_import

    result = candidates_import(path=SHIPPED / "scenes.jsonl")
    assert result.created["clips"] == 24
    assert Clip.objects.filter(vatex_id__startswith="demo-scene-").count() == 24
    assert ReferenceCaption.objects.count() == 72
    assert CandidateCaption.objects.count() == 168
    intended = demo_scenes.load_intended(SHIPPED / "intended.jsonl")
    assert set(CandidateCaption.objects.values_list("external_id", flat=True)) == set(intended)
    again = candidates_import(path=SHIPPED / "scenes.jsonl")
    assert again.already_imported is True
