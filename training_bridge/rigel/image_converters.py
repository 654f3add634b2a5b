"""Converters from the published judgment files of the image benchmarks into the generic image
JSONL (``image_benchmarks.py``), written from the files' published formats (docs/metrics.md says
where to get them; ``python -m training_bridge.rigel.cli convert-images`` runs them).

- **Flickr8K** (Hodosh et al. 2013; the corpus' readme): ``Flickr8k.token.txt`` holds the captions,
  one per line, ``<image file>#<0-4>`` TAB caption. ``ExpertAnnotations.txt``: image file TAB
  caption id TAB three expert scores, 1 ("does not describe the image at all") to 4 ("describes
  the image"). ``CrowdFlowerAnnotations.txt``: image file TAB caption id TAB share of "yes" TAB
  number of yes TAB number of no (at least three votes per pair). The candidate is the caption the
  id names (often another image's); the references are the image's own captions less the
  candidate itself.
- **Composite** (Aditya et al. 2015): Amazon Mechanical Turk CSVs (``8k_correctness.csv``,
  ``30k_correctness.csv``, ``coco_correctness.csv``; ``*_throughness.csv`` alike), one HIT per row,
  whose input field is ``<image URL>;<caption 1>;...;<caption k>;<rating 1>;...;<rating k>``
  (k = 3 for Flickr8K, 4 for Flickr30K and COCO; ratings 1-5). The references come from the
  images' own corpora (Flickr8k.token.txt, Flickr30k's results_20130124.token, COCO's
  captions_val2014.json). On the Flickr8K part a candidate that is one of the image's references
  is left out, as CLIPScore's preparation does (recalled, unverified).
- **Nebula** (Matsuda et al. 2024): the Hugging Face dataset ``Ka2ukiMatsuda/Nebula``, Parquet
  with ``file_name``, ``image`` (the picture's bytes), ``refs``, ``mt`` (the candidate) and
  ``human_score`` (the mean rating; ``[0, 1]`` by default, see ``--scale``); a JSON Lines file
  with the same fields (``image`` absent) is read too.
"""

from __future__ import annotations

import csv
import json
import re
from collections import OrderedDict, defaultdict
from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path, PurePosixPath
from typing import Any

from training_bridge.rigel.image_benchmarks import ImageBenchmarkError

FORMATS = ("flickr8k-expert", "flickr8k-cf", "composite", "nebula")


def _fields(line: str, count: int, where: str) -> list[str]:
    parts = line.rstrip("\r\n").split("\t")
    if len(parts) < count:
        raise ImageBenchmarkError(f"{where}: expected {count} tab-separated fields")
    return parts


def read_flickr_captions(lines: Iterable[str], *, name: str = "captions") -> dict[str, str]:
    """{caption id ("<image file>#<n>"): caption} of a Flickr token file."""
    captions: dict[str, str] = {}
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        caption_id, caption = _fields(line, 2, f"{name}, line {number}")[:2]
        captions[caption_id.strip()] = " ".join(caption.split())
    return captions


def references_by_image(captions: dict[str, str]) -> dict[str, list[tuple[str, str]]]:
    """{image file: [(caption id, caption), ...]} in caption-number order."""
    by_image: dict[str, list[tuple[str, str]]] = defaultdict(list)
    for caption_id, caption in captions.items():
        by_image[caption_id.split("#", 1)[0]].append((caption_id, caption))
    return {image: sorted(rows) for image, rows in by_image.items()}


def _image_id(prefix: str, image: str) -> str:
    return f"{prefix}_{PurePosixPath(image).stem}"


def _flickr8k(
    rows: Iterable[tuple[str, str, list[tuple[str, float]]]],
    captions: dict[str, str],
    *,
    prefix: str,
    scale: tuple[float, float],
    name: str,
) -> Iterator[dict[str, Any]]:
    by_image = references_by_image(captions)
    images: OrderedDict[str, list[dict[str, Any]]] = OrderedDict()
    for image, caption_id, judgments in rows:
        if caption_id not in captions:
            raise ImageBenchmarkError(f"{name}: caption {caption_id!r} is not in the captions file")
        images.setdefault(image, []).append(
            {
                "caption": captions[caption_id],
                "system": f"flickr8k:{caption_id}",
                "judgments": [{"rater": rater, "overall": value} for rater, value in judgments],
            }
        )
    for image, candidates in images.items():
        own = {c["system"].split(":", 1)[1] for c in candidates}
        references = [text for cid, text in by_image.get(image, []) if cid not in own]
        yield {
            "image_id": _image_id(prefix, image),
            "image": image,
            "references": references,
            "candidates": candidates,
            "scale": list(scale),
        }


def flickr8k_expert(
    annotations: Iterable[str], captions: dict[str, str], *, name: str = "ExpertAnnotations.txt"
) -> Iterator[dict[str, Any]]:
    """Flickr8K-Expert: three expert scores (1-4) per (image, caption) pair."""

    def rows() -> Iterator[tuple[str, str, list[tuple[str, float]]]]:
        for number, line in enumerate(annotations, start=1):
            if not line.strip():
                continue
            parts = _fields(line, 5, f"{name}, line {number}")
            try:
                scores = [float(value) for value in parts[2:5]]
            except ValueError as error:
                raise ImageBenchmarkError(
                    f"{name}, line {number}: scores must be numbers"
                ) from error
            yield (
                parts[0].strip(),
                parts[1].strip(),
                [(f"expert{k}", score) for k, score in enumerate(scores, start=1)],
            )

    return _flickr8k(rows(), captions, prefix="flickr8k", scale=(1.0, 4.0), name=name)


def flickr8k_cf(
    annotations: Iterable[str],
    captions: dict[str, str],
    *,
    name: str = "CrowdFlowerAnnotations.txt",
) -> Iterator[dict[str, Any]]:
    """Flickr8K-CF: the CrowdFlower votes of each pair as judgments of 1 (yes) and 0 (no), so
    that a candidate's mean judgment is its published share of "yes"."""

    def rows() -> Iterator[tuple[str, str, list[tuple[str, float]]]]:
        for number, line in enumerate(annotations, start=1):
            if not line.strip():
                continue
            where = f"{name}, line {number}"
            parts = _fields(line, 5, where)
            try:
                share, yes, no = float(parts[2]), int(parts[3]), int(parts[4])
            except ValueError as error:
                raise ImageBenchmarkError(f"{where}: share, yes and no must be numbers") from error
            if yes < 0 or no < 0 or yes + no == 0 or abs(share - yes / (yes + no)) > 0.01:
                raise ImageBenchmarkError(
                    f"{where}: share {share} disagrees with {yes} yes/{no} no"
                )
            votes = [1.0] * yes + [0.0] * no
            yield (
                parts[0].strip(),
                parts[1].strip(),
                [(f"crowd{k}", vote) for k, vote in enumerate(votes, start=1)],
            )

    return _flickr8k(rows(), captions, prefix="flickr8k", scale=(0.0, 1.0), name=name)


_COMPOSITE_FIELD = re.compile(r"(https?://[^;]+);(.*)", re.DOTALL)


def composite_rows(
    lines: Iterable[str], *, name: str
) -> Iterator[tuple[str, list[tuple[str, float]]]]:
    """(image file, [(caption, rating), ...]) per HIT of a Composite AMT CSV. The HIT's field is
    found by its shape (an image URL, then k captions and k ratings separated by ";"); rows
    without one (the files' trailing summary rows) are skipped."""
    reader = csv.reader(lines)
    for number, row in enumerate(reader, start=1):
        for value in row:
            match = _COMPOSITE_FIELD.search(value)
            if match is None:
                continue
            rest = match.group(2).split(";")
            if len(rest) < 2 or len(rest) % 2:
                raise ImageBenchmarkError(
                    f"{name}, row {number}: captions and ratings differ in number"
                )
            half = len(rest) // 2
            try:
                ratings = [float(r) for r in rest[half:]]
            except ValueError as error:
                raise ImageBenchmarkError(
                    f"{name}, row {number}: ratings must be numbers"
                ) from error
            image = PurePosixPath(match.group(1).strip()).name
            captions = [" ".join(c.split()) for c in rest[:half]]
            yield image, list(zip(captions, ratings, strict=True))
            break


def composite(
    files: Sequence[tuple[str, Iterable[str]]],
    references: dict[str, list[str]],
    *,
    skip_reference_candidates: Sequence[str] = ("8k",),
) -> Iterator[dict[str, Any]]:
    """Composite: `files` are (file name, lines) of the AMT CSVs; `references` maps an image's
    file stem to its captions. A file whose name starts with one of `skip_reference_candidates`
    (the Flickr8K part) leaves out candidates equal to one of the image's references."""
    images: OrderedDict[str, dict[str, Any]] = OrderedDict()
    for file_name, lines in files:
        subset = Path(file_name).name.split("_", 1)[0]
        skip = any(Path(file_name).name.startswith(p) for p in skip_reference_candidates)
        for image, pairs in composite_rows(lines, name=file_name):
            stem = PurePosixPath(image).stem
            if stem not in references:
                raise ImageBenchmarkError(f"{file_name}: no references for image {image}")
            refs = references[stem]
            entry = images.setdefault(
                image,
                {
                    "image_id": _image_id(f"composite_{subset}", image),
                    "image": image,
                    "references": list(refs),
                    "candidates": [],
                    "scale": [1, 5],
                },
            )
            for caption, rating in pairs:
                if skip and caption in refs:
                    continue
                entry["candidates"].append(
                    {
                        "caption": caption,
                        "system": f"composite:{Path(file_name).stem}",
                        "judgments": [{"rater": "amt", "overall": rating}],
                    }
                )
    for entry in images.values():
        if entry["candidates"]:
            yield entry


def read_coco_captions(data: dict[str, Any]) -> dict[str, list[str]]:
    """{file stem ("COCO_val2014_000000xxxxxx"): captions} of a COCO captions JSON."""
    names = {int(image["id"]): PurePosixPath(image["file_name"]).stem for image in data["images"]}
    captions: dict[str, list[str]] = defaultdict(list)
    for annotation in data["annotations"]:
        stem = names.get(int(annotation["image_id"]))
        if stem is not None:
            captions[stem].append(" ".join(str(annotation["caption"]).split()))
    return dict(captions)


def flickr_references(captions: dict[str, str]) -> dict[str, list[str]]:
    """{file stem: captions} of a Flickr token file (Flickr8k.token.txt, results_20130124.token)."""
    return {
        PurePosixPath(image).stem: [text for _, text in rows]
        for image, rows in references_by_image(captions).items()
    }


def nebula(
    rows: Iterable[dict[str, Any]],
    *,
    scale: tuple[float, float] = (0.0, 1.0),
    images_out: Path | None = None,
) -> Iterator[dict[str, Any]]:
    """Nebula: one candidate per row (``mt``), grouped by image; ``human_score`` is the published
    mean score, stored as one judgment on `scale`. With `images_out`, the rows' picture bytes are
    written there under their file names."""
    images: OrderedDict[str, dict[str, Any]] = OrderedDict()
    for number, row in enumerate(rows, start=1):
        where = f"Nebula row {number}"
        file_name = row.get("file_name")
        if not isinstance(file_name, str) or not file_name:
            raise ImageBenchmarkError(f"{where}: file_name missing")
        image = PurePosixPath(file_name).name
        refs = row.get("refs") or []
        entry = images.setdefault(
            image,
            {
                "image_id": _image_id("nebula", image),
                "image": image,
                "references": [" ".join(str(r).split()) for r in refs],
                "candidates": [],
                "scale": list(scale),
            },
        )
        score = row.get("human_score")
        if not isinstance(score, (int, float)):
            raise ImageBenchmarkError(f"{where}: human_score missing")
        entry["candidates"].append(
            {
                "caption": " ".join(str(row.get("mt") or "").split()),
                "system": "nebula",
                "judgments": [{"rater": "nebula-mean", "overall": float(score)}],
            }
        )
        picture = row.get("image")
        if images_out is not None and isinstance(picture, dict) and picture.get("bytes"):
            target = images_out / image
            if not target.exists():
                target.write_bytes(picture["bytes"])
    yield from images.values()


def read_nebula_rows(path: Path) -> Iterator[dict[str, Any]]:
    """Rows of a Nebula Parquet file (the Hugging Face dataset's) or of a JSON Lines file."""
    if path.suffix == ".parquet":
        import pyarrow.parquet as pq

        table = pq.ParquetFile(path)
        for batch in table.iter_batches(batch_size=256):
            yield from batch.to_pylist()
        return
    with path.open(encoding="utf-8") as handle:
        for line in handle:
            if line.strip():
                yield json.loads(line)


def write_jsonl(lines: Iterable[dict[str, Any]], path: Path) -> dict[str, int]:
    """Write the converted images; returns what was written (images, candidates, judgments)."""
    counts = {"images": 0, "candidates": 0, "judgments": 0}
    with path.open("w", encoding="utf-8") as handle:
        for line in lines:
            handle.write(json.dumps(line, ensure_ascii=False, sort_keys=True) + "\n")
            counts["images"] += 1
            counts["candidates"] += len(line["candidates"])
            counts["judgments"] += sum(len(c["judgments"]) for c in line["candidates"])
    return counts
