"""FOIL benchmarks without Django: the noun swap's article, the paragraph rule of ActivityNet-FOIL
on hand-made cases, the FOIL file's two shapes, and the converter of the official files (written
here in their published shapes)."""

from __future__ import annotations

import json
import random
import re
from pathlib import Path

import pytest

from training_bridge.rigel.activitynet_foil import (
    ActivityNetFoilError,
    convert_files,
    overlapping_references,
    write,
)
from training_bridge.rigel.foil import (
    ACTIVITYNET_FOIL,
    FoilFormatError,
    Paragraph,
    foil_accuracy,
    generate_foils,
    make_foil,
    paragraph_accuracy,
    parse_foil_file,
)


@pytest.mark.parametrize(
    ("caption", "nouns", "expected"),
    [
        ("a man cracks an egg into a bowl", ["egg", "dog"], "a man cracks a dog into a bowl"),
        ("An egg lies on the table", ["egg", "dog"], "A dog lies on the table"),
        ("a dog runs in the park", ["dog", "egg"], "an egg runs in the park"),
        ("A dog runs", ["dog", "onion"], "An onion runs"),
        ("the old dog sleeps", ["dog", "egg"], "the old egg sleeps"),  # no article to fit
        ("a big dog sleeps", ["dog", "egg"], "a big egg sleeps"),  # the article is the adjective's
    ],
)
def test_the_noun_swap_fits_the_indefinite_article(caption, nouns, expected):  # type: ignore[no-untyped-def]
    foil, original, replacement = make_foil(
        caption, nouns=nouns, forbidden=[], rng=random.Random(0)
    ) or ("", "", "")
    assert foil == expected
    assert (original, replacement) == (nouns[0], nouns[1])


def test_generated_foils_carry_the_fitted_article():
    made = generate_foils(
        {"clip-1": ["a woman breaks an egg", "someone cooks"]},
        corpus=["a woman breaks an egg", "a dog"],
        seed=0,
    )
    (pair,) = made.pairs
    assert pair.foil == "a woman breaks a dog" and made.benchmark == "noun-swap"


def test_a_video_is_right_only_when_its_paragraph_mean_is_strictly_higher():
    # video A: sentences 0.9 / 0.1 against foils 0.4 / 0.5 -> means 0.5 > 0.45: right, though
    #          its second sentence alone is wrong;
    # video B: 0.3 against 0.3 -> a tie: wrong;
    # video C: 0.2 / 0.2 / 0.8 against 0.5 / 0.5 / 0.1 -> 0.4 < 0.3667? no: 0.4 > 0.3667: right.
    captions = [0.9, 0.1, 0.3, 0.2, 0.2, 0.8]
    foils = [0.4, 0.5, 0.3, 0.5, 0.5, 0.1]
    paragraphs = [Paragraph("A", 0, 2), Paragraph("B", 2, 3), Paragraph("C", 3, 6)]
    assert paragraph_accuracy(captions, foils, paragraphs) == pytest.approx(200 / 3, abs=1e-4)
    # the same sentences counted pair by pair give another figure: 0.9>0.4, 0.8>0.1 only
    assert foil_accuracy(captions, foils) == pytest.approx(200 / 6, abs=1e-4)
    assert paragraph_accuracy([], [], []) is None
    with pytest.raises(ValueError, match="video C"):
        paragraph_accuracy(captions[:5], foils[:5], paragraphs)


def _line(**fields: object) -> str:
    return json.dumps(fields)


def test_a_foil_file_of_paragraphs_is_read_video_by_video():
    references = {"s0": ["r0"], "s1": ["r1"], "s2": ["r2"]}
    lines = [
        _line(video="v_a", benchmark=ACTIVITYNET_FOIL, segments=[
            {"clip": "s0", "caption": "a man runs", "foil": "a dog runs", "references": ["x"]},
            {"clip": "s1", "caption": "he stops", "foil": "it stops"},
        ]),
        "",
        _line(video="v_b", benchmark=ACTIVITYNET_FOIL, segments=[
            {"clip": "s2", "caption": "a cat", "foil": "a hat"},
        ]),
    ]  # fmt: skip
    parsed = parse_foil_file(lines, clip_references=references)
    assert parsed.benchmark == ACTIVITYNET_FOIL and parsed.source == "file"
    assert parsed.paragraphs == [Paragraph("v_a", 0, 2), Paragraph("v_b", 2, 3)]
    assert [pair.references for pair in parsed.pairs] == [("x",), ("r1",), ("r2",)]
    # paragraphs that do not all say activitynet-foil are a user's paragraphs (no published row)
    other = parse_foil_file(
        [lines[0], _line(video="v_b", segments=[{"clip": "s2", "caption": "a", "foil": "b"}])],
        clip_references=references,
    )
    assert other.benchmark == "paragraphs"


@pytest.mark.parametrize(
    ("lines", "message"),
    [
        (
            [
                _line(clip="s0", caption="a", foil="b"),
                _line(video="v", segments=[{"clip": "s0", "caption": "a", "foil": "b"}]),
            ],
            "line 2: a FOIL file holds pairs or paragraphs, not both",
        ),
        ([_line(video="v", segments=[])], "line 1: 'segments' must be a non-empty list"),
        (
            [_line(video="v", segments=[{"clip": "s0", "caption": "a", "foil": "a"}])],
            "line 1: no sentence of the paragraph differs from its foil",
        ),
        (
            [_line(video="v", segments=[{"clip": "zz", "caption": "a", "foil": "b"}])],
            "line 1, segment 0: unknown clip 'zz'",
        ),
        (
            [
                _line(video="v", segments=[{"clip": "s0", "caption": "a", "foil": "b"}]),
                _line(video="v", segments=[{"clip": "s0", "caption": "a", "foil": "b"}]),
            ],
            "line 2: video 'v' appears twice",
        ),
    ],
)
def test_a_bad_paragraph_file_is_refused_naming_the_line(lines, message):  # type: ignore[no-untyped-def]
    with pytest.raises(FoilFormatError, match=message):
        parse_foil_file(lines, clip_references={"s0": ["r"]})


def test_references_overlap_as_the_official_script_counts_them():
    # segment [10.7, 20.2] -> seconds 10..20; a reference on [18, 30] is covered 3/13 (no),
    # one on [12.9, 15.5] -> 12..15 fully (yes), one on [0, 14] -> 5/15 = 0.33 (no), one on
    # [5, 12] -> 3/8 = 0.375 (no), one on [9, 13] -> 4/5 (yes)
    chosen = overlapping_references(
        [10.7, 20.2], [[18, 30], [12.9, 15.5], [0, 14], [5, 12], [9, 13]]
    )
    assert chosen == [1, 4]
    # none overlapping enough: every reference
    assert overlapping_references([0, 1], [[50, 60], [70, 80]]) == [0, 1]


def _official_files(folder: Path) -> dict[str, Path]:
    """A tiny benchmark in the published shapes (EMScore authors' ActivityNet-FOIL release)."""
    right = {
        "results": {
            "v_aaa": [
                {"sentence": "A man holds a guitar."},
                {"sentence": "He plays it on a stage."},
            ],
            "v_bbb": [{"sentence": "A dog runs on the beach."}],
            "v_ccc": [{"sentence": "One."}, {"sentence": "Two."}],
            "v_ddd": [{"sentence": "Only right."}],
        }
    }
    foil = {
        "results": {
            "v_aaa": [
                {"sentence": "A man holds a violin."},
                {"sentence": "He plays it on a stage."},
            ],
            "v_bbb": [{"sentence": "A cat runs on the beach."}],
            "v_ccc": [{"sentence": "One."}],  # a different length: left out
        }
    }
    test_1 = {
        "v_aaa": {
            "duration": 30.0,
            "timestamps": [[0.5, 12.2], [12.2, 31.0]],
            "sentences": ["A man holds a guitar.", "He plays it on a stage."],
        },
        "v_bbb": {"duration": 9.0, "timestamps": [[1, 8]], "sentences": ["A dog runs."]},
        "v_ccc": {"duration": 9.0, "timestamps": [[1, 4], [4, 8]], "sentences": ["a", "b"]},
    }
    test_2 = {
        "v_aaa": {
            "duration": 30.0,
            "timestamps": [[0, 11], [13, 29]],
            "sentences": ["A person picks up a guitar.", "The man performs a song."],
        },
        "v_bbb": {"duration": 9.0, "timestamps": [[0, 9]], "sentences": ["A dog runs along."]},
        "v_ccc": {"duration": 9.0, "timestamps": [[0, 9]], "sentences": ["x"]},
    }
    train = {
        "v_zzz": {
            "duration": 5,
            "timestamps": [[0, 5], [0, 5]],
            "sentences": ["a short caption", " ".join(["word"] * 67)],
        }
    }
    paths = {}
    for name, data in [
        ("right", right),
        ("foil", foil),
        ("segments", test_1),
        ("references", test_2),
        ("train", train),
    ]:
        paths[name] = folder / f"{name}.json"
        paths[name].write_text(json.dumps(data))
    return paths  # fmt: skip


def test_the_converter_writes_segment_clips_paragraphs_and_the_idf_corpus(tmp_path):
    paths = _official_files(tmp_path)
    conversion = convert_files(**paths)
    assert conversion.summary() == {
        "videos": 2,
        "segments": 3,
        "skipped_videos": {"no foil paragraph": 1, "paragraphs of different lengths": 1},
        "idf_captions": 1,  # the 67-word sentence is dropped, as the official script drops it
    }
    first, second, third = conversion.clips
    assert first == {
        "clip_id": "anetfoil-v_aaa-s00",
        "youtube_id": "v_aaa",
        "start": 0.5,
        "end": 12.2,
        "references": ["A person picks up a guitar."],  # 0..11 covered by 0..12
        "candidates": [
            {"id": "anetfoil-v_aaa-s00:correct", "text": "A man holds a guitar.",
             "system": "activitynet-foil"}
        ],
    }  # fmt: skip
    assert (second["start"], second["end"]) == (12.2, 30.0)  # clamped to the duration
    assert second["references"] == ["The man performs a song."]
    assert third["clip_id"] == "anetfoil-v_bbb-s00"
    video_a = conversion.paragraphs[0]
    assert video_a["video"] == "v_aaa" and video_a["benchmark"] == ACTIVITYNET_FOIL
    assert [s["foil"] for s in video_a["segments"]] == [
        "A man holds a violin.",
        "He plays it on a stage.",
    ]
    written = write(conversion, tmp_path / "out")
    lines = Path(written["foil_file"]).read_text().splitlines()
    parsed = parse_foil_file(
        lines, clip_references={clip["clip_id"]: clip["references"] for clip in conversion.clips}
    )
    assert parsed.benchmark == ACTIVITYNET_FOIL and len(parsed.paragraphs) == 2
    assert Path(written["idf_corpus"]).read_text() == "a short caption\n"
    # a videos folder keeps only the videos it has files for
    videos = tmp_path / "videos"
    videos.mkdir()
    (videos / "v_bbb.mp4").write_bytes(b"")
    kept = convert_files(**paths, videos=videos)
    assert [p["video"] for p in kept.paragraphs] == ["v_bbb"]
    assert kept.skipped["no video file"] == 2  # v_aaa and v_ccc


def test_the_converter_names_a_file_it_cannot_read(tmp_path):
    paths = _official_files(tmp_path)
    paths["right"].write_text(json.dumps({"v_aaa": []}))
    with pytest.raises(ActivityNetFoilError, match=re.escape("expected {'results'")):
        convert_files(**paths)
    paths = _official_files(tmp_path)
    with pytest.raises(ActivityNetFoilError, match="no segments file"):
        convert_files(**{**paths, "segments": tmp_path / "missing.json"})
