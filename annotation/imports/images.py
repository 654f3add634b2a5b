"""The generic image JSONL (docs/import-formats.md, "Still images"): one still image per line with
its references, candidate captions and, optionally, judgments of each candidate.

    {"image_id": "flickr_123", "image": "123.jpg", "references": ["..."],
     "candidates": [{"caption": "...", "system": "...",
                     "judgments": [{"rater": "expert1", "overall": 3}]}],
     "scale": [1, 4]}

Images become clips of modality `image` (no YouTube id, no window) through `datasets_app`'s
writers; judgments go to an imported campaign (one `overall` question) like the generic judgments
format's. `overall` is on the source scale (`scale` of the line, else the importer's `scale`, else
1–5) and is stored mapped linearly onto 1–5 and rounded to the nearest level; a scale of two to
five whole levels maps its levels to distinct stored levels (1–4 → 1, 2, 4, 5), so no order is
lost. The same guarantees as every import: the whole file and every named image file are checked
before anything is written, then one transaction; a refusal names the line and the field.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from django.contrib.auth.models import User

from annotation.imports.judgments import (
    CAMPAIGN_SLUG_PATTERN,
    RATER_ID_PATTERN,
    campaign_judgments_write,
    judgment_worker_external_id,
)
from annotation.imports.writers import JudgmentSpec
from datasets_app.models import ClipModality, ImportBatch, ImportKind
from datasets_app.services.images import IMAGE_EXTENSIONS
from datasets_app.services.imports.base import (
    CLIP_ID_PATTERN,
    EXTERNAL_ID_PATTERN,
    ClipIdentity,
    Counts,
    FieldError,
    ImportRejected,
    ImportResult,
    ImportSource,
    ProgressCallback,
    clean_identifier,
    clean_text,
    first_undecodable_path,
    iter_jsonl_objects,
)
from datasets_app.services.imports.batches import (
    CampaignWritten,
    import_checked,
    import_open,
    import_write_once,
)
from datasets_app.services.imports.vatex import MAX_CAPTIONS_PER_CLIP
from datasets_app.services.imports.writers import CandidateSpec, ClipSpec, dataset_rows_write

IMAGE_LINE_KEYS = {"image_id", "image", "references", "candidates", "scale"}
CANDIDATE_KEYS = {"caption", "system", "id", "judgments"}
JUDGMENT_KEYS = {"rater", "overall"}
IMAGE_FILE_PATTERN = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.+-]{0,254}$")
DEFAULT_SYSTEM = "unknown"
DEFAULT_SCALE = (1.0, 5.0)
MAX_JUDGMENTS_PER_CANDIDATE = 100


def image_candidate_external_id(image_id: str, index: int) -> str:
    """The candidate at `index` (0-based) of an image line that gives no `id`."""
    return f"image:{image_id}:{index}"


def scale_map(value: float, *, low: float, high: float) -> int:
    """A rating on the source scale [low, high] onto 1–5, linearly, rounded to the nearest level."""
    return int(round(1 + 4 * (value - low) / (high - low)))


@dataclass
class ImageImport:
    """What a checked image file brings: the specs to write and each image's file."""

    clips: list[ClipSpec] = field(default_factory=list)
    candidates: list[CandidateSpec] = field(default_factory=list)
    judgments: list[JudgmentSpec] = field(default_factory=list)
    files: dict[str, Path] = field(default_factory=dict)


def images_import(
    *,
    path: str | Path,
    images: str | Path | None,
    campaign_slug: str = "",
    scale: tuple[float, float] | None = None,
    user: User | None = None,
    progress: ProgressCallback | None = None,
) -> tuple[ImportResult, dict[str, Path]]:
    """Import the image JSONL at `path`; `images` is the folder its `image` file names are found
    in (every one must exist before anything is written; None skips the check and the files).
    Judgments go to the campaign `campaign_slug` (required when the file has any). Returns the
    result and {image id: image file} for the caller to queue (`image_attach_jobs_create`)."""
    scale, folder = _images_options(
        path=path, images=images, campaign_slug=campaign_slug, scale=scale
    )
    source, watch, earlier = import_open(
        path=path, kind=ImportKind.IMAGES, target=campaign_slug, campaign=campaign_slug or None
    )
    parsed = _images_read(
        source, folder=folder, scale=scale, campaign_slug=campaign_slug, progress=progress
    )
    if earlier is not None:
        return earlier, parsed.files
    if parsed.judgments and not campaign_slug:
        raise source.reject(
            "the file has judgments: name the campaign they go to (--campaign SLUG)",
            line=parsed.judgments[0].line,
            field=parsed.judgments[0].field,
        )

    def write(batch: ImportBatch, counts: Counts) -> CampaignWritten | None:
        return _images_write(
            source=source,
            batch=batch,
            counts=counts,
            parsed=parsed,
            campaign_slug=campaign_slug,
            user=user,
            progress=progress,
        )

    result = import_write_once(
        source=source,
        watch=watch,
        kind=ImportKind.IMAGES,
        target=campaign_slug,
        user=user,
        write=write,
        campaign=campaign_slug or None,
    )
    return result, parsed.files


def _images_write(
    *,
    source: ImportSource,
    batch: ImportBatch,
    counts: Counts,
    parsed: ImageImport,
    campaign_slug: str,
    user: User | None,
    progress: ProgressCallback | None,
) -> CampaignWritten | None:
    """The images as clips with their references and candidates, then any judgments."""
    dataset_rows_write(
        source=source,
        batch=batch,
        clips=parsed.clips,
        candidates=parsed.candidates,
        counts=counts,
        progress=progress,
    )
    if not parsed.judgments:
        return None
    return campaign_judgments_write(
        source=source,
        batch=batch,
        counts=counts,
        slug=campaign_slug,
        keys=["overall"],
        judgments=parsed.judgments,
        user=user,
        progress=progress,
    )


def _images_read(
    source: ImportSource,
    *,
    folder: Path | None,
    scale: tuple[float, float] | None,
    campaign_slug: str,
    progress: ProgressCallback | None,
) -> ImageImport:
    """Check every line of the file (and every image file it names) before anything is written."""
    reader = ImageLineReader(source=source, folder=folder, scale=scale, campaign_slug=campaign_slug)
    for line, row in iter_jsonl_objects(source):
        try:
            reader.image_line(row, line=line)
        except FieldError as error:
            raise source.reject(error.message, line=line, field=error.field)
        if progress and len(reader.parsed.clips) % 500 == 0:
            progress("validating", len(reader.parsed.clips), 0)
    import_checked(source, reader.parsed.clips, noun="images")
    return reader.parsed


def _images_options(
    *,
    path: str | Path,
    images: str | Path | None,
    campaign_slug: str,
    scale: tuple[float, float] | None,
) -> tuple[tuple[float, float] | None, Path | None]:
    """The importer's own options checked before the file is read: the cleaned `scale` and the
    resolved images folder."""
    if campaign_slug and not CAMPAIGN_SLUG_PATTERN.match(campaign_slug):
        raise ImportRejected(
            file=str(path),
            message=f"{campaign_slug!r} is not a campaign slug (lowercase letters, digits, - and _)",
        )
    if scale is not None:
        try:
            scale = _clean_scale(list(scale), field="--scale")
        except FieldError as error:
            raise ImportRejected(file=str(path), message=error.message, field=error.field)
    folder = Path(images).resolve() if images is not None else None
    if folder is not None and not folder.is_dir():
        raise ImportRejected(file=str(path), message=f"no such images folder: {images}")
    return scale, folder


@dataclass
class ImageLineReader:
    """Checks the lines of an image file one by one into `parsed`, remembering the image and
    candidate ids seen so far (a repeated one names the line it first came on)."""

    source: ImportSource
    folder: Path | None
    scale: tuple[float, float] | None
    campaign_slug: str
    parsed: ImageImport = field(default_factory=ImageImport)
    seen_images: dict[str, int] = field(default_factory=dict)
    seen_candidates: dict[str, int] = field(default_factory=dict)

    def image_line(self, row: dict[str, Any], *, line: int) -> None:
        if self.source.first_bad_offset is not None:
            bad = first_undecodable_path(row)
            if bad:
                raise FieldError(bad, "the text is not valid UTF-8")
        unknown = sorted(set(row) - IMAGE_LINE_KEYS)
        if unknown:
            raise FieldError(unknown[0], "unknown field (see docs/import-formats.md)")
        for name in ("image_id", "image", "candidates"):
            if name not in row:
                raise FieldError(name, "the field is missing")
        image_id = clean_identifier(
            row["image_id"], field="image_id", pattern=CLIP_ID_PATTERN, what="image id"
        )
        if image_id in self.seen_images:
            raise FieldError(
                "image_id",
                f"the image {image_id!r} is already on line {self.seen_images[image_id]}",
            )
        self.seen_images[image_id] = line
        file_name = _clean_image_file(row["image"], folder=self.folder)
        line_scale = (
            _clean_scale(row["scale"], field="scale") if row.get("scale") is not None else None
        )
        low, high = line_scale or self.scale or DEFAULT_SCALE

        references = row.get("references", [])
        if not isinstance(references, list):
            raise FieldError("references", "expected a list of reference captions")
        if len(references) > MAX_CAPTIONS_PER_CLIP:
            raise FieldError("references", f"more than {MAX_CAPTIONS_PER_CLIP} references")
        texts = [clean_text(text, field=f"references[{i}]") for i, text in enumerate(references)]

        candidates = row["candidates"]
        if not isinstance(candidates, list) or not candidates:
            raise FieldError("candidates", "expected a non-empty list of candidates")
        if len(candidates) > MAX_CAPTIONS_PER_CLIP:
            raise FieldError("candidates", f"more than {MAX_CAPTIONS_PER_CLIP} candidates")
        for index, candidate in enumerate(candidates):
            where = f"candidates[{index}]"
            if not isinstance(candidate, dict):
                raise FieldError(where, "expected an object with caption, system, judgments")
            try:
                self.candidate(
                    candidate, image_id=image_id, index=index, line=line, low=low, high=high
                )
            except FieldError as error:
                raise error.within(where)

        self.parsed.clips.append(
            ClipSpec(
                clip_id=image_id,
                identity=ClipIdentity(image_id, "", 0.0, 0.0),
                line=line,
                field="image_id",
                references=texts,
                modality=ClipModality.IMAGE.value,
            )
        )
        if self.folder is not None:
            self.parsed.files[image_id] = self.folder / file_name

    def candidate(
        self,
        candidate: dict[str, Any],
        *,
        image_id: str,
        index: int,
        line: int,
        low: float,
        high: float,
    ) -> None:
        unknown = sorted(set(candidate) - CANDIDATE_KEYS)
        if unknown:
            raise FieldError(unknown[0], "unknown field (see docs/import-formats.md)")
        if "caption" not in candidate:
            raise FieldError("caption", "the field is missing")
        text = clean_text(candidate["caption"], field="caption")
        system = candidate.get("system")
        system_name = (
            clean_text(system, field="system", max_chars=200)
            if system is not None
            else DEFAULT_SYSTEM
        )
        external_id = self.candidate_id(
            candidate.get("id"), image_id=image_id, index=index, line=line
        )
        self.parsed.candidates.append(
            CandidateSpec(
                external_id=external_id,
                clip_id=image_id,
                text=text,
                system_name=system_name,
                system_version="",
                position=index,
                line=line,
                field=f"candidates[{index}].caption",
            )
        )
        self.candidate_judgments(
            candidate.get("judgments") or [],
            external_id=external_id,
            where=f"candidates[{index}]",
            line=line,
            low=low,
            high=high,
        )

    def candidate_id(self, value: Any, *, image_id: str, index: int, line: int) -> str:
        """The candidate's external id (its `id`, else one made of the image id and its index),
        refused when an earlier line already has it."""
        external_id = (
            clean_identifier(value, field="id", pattern=EXTERNAL_ID_PATTERN, what="id")
            if value is not None
            else image_candidate_external_id(image_id, index)
        )
        if external_id in self.seen_candidates:
            raise FieldError(
                "id",
                f"the candidate id {external_id!r} is already on line "
                f"{self.seen_candidates[external_id]}",
            )
        self.seen_candidates[external_id] = line
        return external_id

    def candidate_judgments(
        self,
        judgments: Any,
        *,
        external_id: str,
        where: str,
        line: int,
        low: float,
        high: float,
    ) -> None:
        """A candidate's judgments, each by a different rater, mapped onto 1–5."""
        if not isinstance(judgments, list):
            raise FieldError("judgments", "expected a list of judgments")
        if len(judgments) > MAX_JUDGMENTS_PER_CANDIDATE:
            raise FieldError("judgments", f"more than {MAX_JUDGMENTS_PER_CANDIDATE} judgments")
        raters: set[str] = set()
        for number, judgment in enumerate(judgments):
            judgment_where = f"judgments[{number}]"
            rater, value = _image_judgment(
                judgment, where=judgment_where, low=low, high=high, raters=raters
            )
            self.parsed.judgments.append(
                JudgmentSpec(
                    candidate_external_id=external_id,
                    worker_external_id=judgment_worker_external_id(
                        campaign_slug=self.campaign_slug or "-", rater_id=rater
                    ),
                    values={"overall": scale_map(value, low=low, high=high)},
                    line=line,
                    field=f"{where}.{judgment_where}.overall",
                )
            )


def _image_judgment(
    judgment: Any, *, where: str, low: float, high: float, raters: set[str]
) -> tuple[str, float]:
    """One judgment {rater, overall} of a candidate: its rater id (added to `raters`, those who
    judged the candidate so far) and its rating on the source scale [low, high]."""
    if not isinstance(judgment, dict):
        raise FieldError(where, "expected an object {rater, overall}")
    unknown = sorted(set(judgment) - JUDGMENT_KEYS)
    if unknown:
        raise FieldError(f"{where}.{unknown[0]}", "unknown field (see docs/import-formats.md)")
    for name in ("rater", "overall"):
        if name not in judgment:
            raise FieldError(f"{where}.{name}", "the field is missing")
    rater = clean_identifier(
        judgment["rater"], field=f"{where}.rater", pattern=RATER_ID_PATTERN, what="rater id"
    )
    if rater in raters:
        raise FieldError(f"{where}.rater", f"the rater {rater!r} already judged this candidate")
    raters.add(rater)
    value = _clean_source_rating(judgment["overall"], field=f"{where}.overall", low=low, high=high)
    return rater, value


def _clean_image_file(value: Any, *, folder: Path | None) -> str:
    """A plain file name (no folder part) with an image extension, present in `folder`."""
    if not isinstance(value, str) or not IMAGE_FILE_PATTERN.match(value) or ".." in value:
        raise FieldError("image", "expected a file name (letters, digits, _ . + -; no folder part)")
    if Path(value).suffix.lower() not in IMAGE_EXTENSIONS:
        raise FieldError(
            "image", f"{value!r} is not an image file name ({', '.join(IMAGE_EXTENSIONS)})"
        )
    if folder is not None:
        candidate = folder / value
        if candidate.is_symlink() or not candidate.is_file():
            raise FieldError("image", f"{value!r} is not a file in the images folder")
    return value


def _clean_scale(value: Any, *, field: str) -> tuple[float, float]:
    """[low, high]: whole numbers, two to five levels (high - low between 1 and 4)."""
    if (
        not isinstance(value, list)
        or len(value) != 2
        or not all(isinstance(item, (int, float)) and not isinstance(item, bool) for item in value)
    ):
        raise FieldError(field, "expected [lowest, highest] rating of the source scale")
    low, high = float(value[0]), float(value[1])
    if not (low.is_integer() and high.is_integer() and 1 <= high - low <= 4):
        raise FieldError(
            field,
            f"the scale [{value[0]}, {value[1]}] must be whole numbers with 2 to 5 levels "
            "(each level is stored as a distinct level of 1–5)",
        )
    return low, high


def _clean_source_rating(value: Any, *, field: str, low: float, high: float) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise FieldError(field, "expected a whole-number rating")
    number = float(value)
    if not number.is_integer() or not low <= number <= high:
        raise FieldError(
            field, f"the rating {value!r} is not a whole number in [{low:g}, {high:g}]"
        )
    return number
