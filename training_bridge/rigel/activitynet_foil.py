"""ActivityNet-FOIL's official files -> what Lepus imports and scores (`rigel.foil`, protocol
``foil``), following the EMScore authors' evaluation script (``ActivityNet-FOIL_demo.py`` of
github.com/ShiYaya/emscore, read at its published snapshot):

- the benchmark's paragraphs are two dense-captioning submissions of the same shape,
  ``final_right_video_sentences.json`` (the correct paragraphs) and
  ``final_foil_video_sentences.json`` (each with one noun foiled): ``{"results": {video id:
  [{"sentence": ...}, ...]}}``;
- sentence *i* of a video lies on segment *i* of the video in ``anet_entities_test_1.json``
  (``{video id: {"duration", "timestamps": [[start, end], ...], "sentences"}}``);
- its references (reference-based setting) are the sentences of ``anet_entities_test_2.json`` whose
  segments overlap it: with the segment's and the reference's ends truncated to whole seconds,
  ``a..b`` and ``c..d``, a reference is kept when ``|{a..b} ∩ {c..d}| / |{c..d}| > 0.4``; when none
  is kept, all of the video's references are;
- the IDF corpus of EMScore is the sentences of ActivityNet Captions' ``train.json`` of at most 66
  words.

What is written (`convert`):

- ``clips.jsonl``: one segment clip per sentence, in `import_candidates`' generic format: clip id
  ``anetfoil-<video id>-s<NN>``, the source video id (so that `attach_videos` cuts every segment
  from ``<video id>.mp4``) and the segment's window (clamped to the video's duration), the selected
  references, and the correct sentence as the one candidate (system ``activitynet-foil``);
- ``activitynet_foil.jsonl``: one paragraph per video (``{"video", "benchmark":
  "activitynet-foil", "segments": [{"clip", "caption", "foil", "references"}, ...]}``), the file
  `evaluate_rigel --protocol foil --foil-file` scores;
- ``idf_corpus.txt`` (with ``train.json``): EMScore's IDF corpus, one caption a line.

A video is left out, counted by reason, when its two paragraphs differ in length, a sentence has no
segment, a segment is empty after clamping, or (with a videos folder) its video file is absent: the
official script likewise scores only the videos it has features for. Django-free.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from training_bridge.rigel.foil import ACTIVITYNET_FOIL

SYSTEM = "activitynet-foil"
OVERLAP_SHARE = 0.4  # the official script's threshold (strictly above)
IDF_MAX_WORDS = 66  # the official script drops longer training sentences from the IDF corpus
VIDEO_SUFFIXES = (".mp4", ".mkv", ".webm", ".avi", ".mov", ".m4v")


class ActivityNetFoilError(ValueError):
    """An input file is missing or not in the published shape (the message names it)."""


@dataclass
class Conversion:
    clips: list[dict[str, Any]] = field(default_factory=list)
    paragraphs: list[dict[str, Any]] = field(default_factory=list)
    idf_corpus: list[str] = field(default_factory=list)
    skipped: Counter[str] = field(default_factory=Counter)  # reason -> videos

    def summary(self) -> dict[str, Any]:
        return {
            "videos": len(self.paragraphs),
            "segments": len(self.clips),
            "skipped_videos": dict(sorted(self.skipped.items())),
            "idf_captions": len(self.idf_corpus),
        }


def overlapping_references(
    segment: Sequence[float], reference_segments: Sequence[Sequence[float]]
) -> list[int]:
    """Indices of the references whose segment the sentence's covers by more than 40 % (whole
    seconds, both ends included, as the official script counts them); every index when none."""
    a, b = int(segment[0]), int(segment[1])
    chosen = []
    for index, reference in enumerate(reference_segments):
        c, d = int(reference[0]), int(reference[1])
        covered = len(set(range(a, b + 1)) & set(range(c, d + 1)))
        span = len(range(c, d + 1))
        if span and covered / span > OVERLAP_SHARE:
            chosen.append(index)
    return chosen or list(range(len(reference_segments)))


def clip_id(video: str, index: int) -> str:
    return f"anetfoil-{video}-s{index:02d}"


def _load(path: Path, what: str) -> Any:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError as error:
        raise ActivityNetFoilError(f"no {what} file at {path}") from error
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as error:
        raise ActivityNetFoilError(f"{what} file {path} is not readable JSON: {error}") from error


def _sentences(submission: Any, what: str) -> dict[str, list[str]]:
    results = submission.get("results") if isinstance(submission, dict) else None
    if not isinstance(results, dict):
        raise ActivityNetFoilError(f"{what}: expected {{'results': {{video id: [sentences]}}}}")
    paragraphs = {}
    for video, entries in results.items():
        if not isinstance(entries, list) or not all(
            isinstance(e, dict) and isinstance(e.get("sentence"), str) for e in entries
        ):
            raise ActivityNetFoilError(f"{what}, video {video}: expected [{{'sentence': ...}}]")
        paragraphs[str(video)] = [entry["sentence"].strip() for entry in entries]
    return paragraphs


def _annotations(data: Any, what: str) -> dict[str, dict[str, Any]]:
    if not isinstance(data, dict):
        raise ActivityNetFoilError(f"{what}: expected {{video id: {{duration, timestamps, ...}}}}")
    for video, entry in data.items():
        if not (
            isinstance(entry, dict)
            and isinstance(entry.get("timestamps"), list)
            and isinstance(entry.get("sentences"), list)
            and len(entry["timestamps"]) == len(entry["sentences"])
        ):
            raise ActivityNetFoilError(
                f"{what}, video {video}: expected 'duration', and 'timestamps' and 'sentences' "
                "of one length"
            )
    return data


def idf_corpus(train: Mapping[str, Any]) -> list[str]:
    """EMScore's IDF corpus: every training sentence of at most 66 words, in file order."""
    corpus = []
    for entry in train.values():
        for sentence in entry.get("sentences", []) if isinstance(entry, dict) else []:
            if isinstance(sentence, str) and len(sentence.split(" ")) <= IDF_MAX_WORDS:
                corpus.append(sentence.strip())
    return corpus


def convert(
    *,
    right: Mapping[str, Sequence[str]],
    foil: Mapping[str, Sequence[str]],
    segments: Mapping[str, Mapping[str, Any]],
    references: Mapping[str, Mapping[str, Any]],
    videos: Iterable[str] | None = None,
    train: Mapping[str, Any] | None = None,
) -> Conversion:
    """The clips, paragraphs (and IDF corpus) of the benchmark; see the module docstring."""
    out = Conversion()
    present = set(videos) if videos is not None else None
    for video in sorted(right):
        if video not in foil:
            out.skipped["no foil paragraph"] += 1
            continue
        if present is not None and video not in present:
            out.skipped["no video file"] += 1
            continue
        if video not in segments or video not in references:
            out.skipped["not in the annotation files"] += 1
            continue
        correct, foiled = list(right[video]), list(foil[video])
        if len(correct) != len(foiled):
            out.skipped["paragraphs of different lengths"] += 1
            continue
        stamps = segments[video]["timestamps"]
        if len(correct) > len(stamps):
            out.skipped["a sentence without a segment"] += 1
            continue
        duration = segments[video].get("duration")
        windows = []
        for stamp in stamps[: len(correct)]:
            start = max(0.0, float(stamp[0]))
            end = float(stamp[1]) if duration is None else min(float(stamp[1]), float(duration))
            windows.append((round(start, 3), round(end, 3)))
        if any(end <= start for start, end in windows):
            out.skipped["an empty segment"] += 1
            continue
        reference_texts = [str(text).strip() for text in references[video]["sentences"]]
        reference_stamps = references[video]["timestamps"]
        pairs = []
        for index, (caption, foiled_caption) in enumerate(zip(correct, foiled, strict=True)):
            chosen = overlapping_references(stamps[index], reference_stamps)
            kept = [reference_texts[i] for i in chosen]
            segment_id = clip_id(video, index)
            start, end = windows[index]
            out.clips.append(
                {
                    "clip_id": segment_id,
                    "youtube_id": video,
                    "start": start,
                    "end": end,
                    "references": kept,
                    "candidates": [
                        {"id": f"{segment_id}:correct", "text": caption, "system": SYSTEM}
                    ],
                }
            )
            pairs.append(
                {"clip": segment_id, "caption": caption, "foil": foiled_caption, "references": kept}
            )
        out.paragraphs.append({"video": video, "benchmark": ACTIVITYNET_FOIL, "segments": pairs})
    if train is not None:
        out.idf_corpus = idf_corpus(train)
    return out


def video_stems(folder: Path) -> set[str]:
    """The video ids a folder has files for (`<video id>.<ext>`, as attach_videos matches them)."""
    if not folder.is_dir():
        raise ActivityNetFoilError(f"no videos folder at {folder}")
    return {
        path.stem
        for path in folder.iterdir()
        if path.is_file() and path.suffix.lower() in VIDEO_SUFFIXES
    }


def convert_files(
    *,
    right: Path,
    foil: Path,
    segments: Path,
    references: Path,
    videos: Path | None = None,
    train: Path | None = None,
) -> Conversion:
    return convert(
        right=_sentences(_load(right, "correct paragraphs"), str(right)),
        foil=_sentences(_load(foil, "foil paragraphs"), str(foil)),
        segments=_annotations(_load(segments, "segments"), str(segments)),
        references=_annotations(_load(references, "references"), str(references)),
        videos=video_stems(videos) if videos is not None else None,
        train=_load(train, "training captions") if train is not None else None,
    )


def write(conversion: Conversion, out: Path) -> dict[str, str]:
    """Write the files into `out` (created); {what: path}."""
    out.mkdir(parents=True, exist_ok=True)
    paths = {"clips": out / "clips.jsonl", "foil_file": out / "activitynet_foil.jsonl"}
    paths["clips"].write_text(
        "".join(json.dumps(line, ensure_ascii=False) + "\n" for line in conversion.clips),
        encoding="utf-8",
    )
    paths["foil_file"].write_text(
        "".join(json.dumps(line, ensure_ascii=False) + "\n" for line in conversion.paragraphs),
        encoding="utf-8",
    )
    if conversion.idf_corpus:
        paths["idf_corpus"] = out / "idf_corpus.txt"
        paths["idf_corpus"].write_text(
            "".join(caption + "\n" for caption in conversion.idf_corpus), encoding="utf-8"
        )
    return {name: str(path) for name, path in paths.items()}
