"""The release reads in plain Python over the ORM, for databases other than PostgreSQL (the SQLite
demo). Same interface (`export.reads.protocol.ReleaseReads`) and the same rules as the PostgreSQL
reads, and the same bytes: the JSONL lines are `json.dumps(record, sort_keys=True, ...)` itself,
so on PostgreSQL data this class is also the reference the SQL is tested against.

It keeps the release's rows in memory (one small tuple per candidate): fine for a demo, while
PostgreSQL deployments stream through `export.reads.postgresql`.
"""

from __future__ import annotations

import json
import math
from collections import defaultdict
from collections.abc import Iterator, Mapping, Sequence
from contextlib import ExitStack
from dataclasses import dataclass, field
from decimal import ROUND_HALF_UP, Decimal
from types import TracebackType
from typing import Any

import numpy as np
from django.db import transaction
from django.db.models import Q

from annotation.models import (
    AuditEntry,
    Campaign,
    CampaignCandidate,
    Judgment,
    Participation,
    ParticipationStatus,
    Platform,
    ReviewState,
    Worker,
    WorkerExclusion,
)
from datasets_app.models import (
    CandidateCaption,
    CandidateKind,
    Clip,
    ImportBatch,
    ReferenceCaption,
)
from export import splitting
from export.models import ReleaseRecord
from export.reads.protocol import EXCLUSION_REASONS, campaign_rubric
from export.records import FLOAT_LIMIT, RecordSchema, canonical_line
from export.statistics import RATING_VALUES, accumulate_coincidence


@dataclass
class _Item:
    cc_id: int
    campaign_id: int
    candidate_id: int
    clip_id: int
    overall: float
    training_class: int
    kept_judgments: int
    review_state: str
    means: dict[str, Any]
    calibrated_scores: dict[str, Any] = field(default_factory=dict)
    calibrated_overall: float | None = None


def _reason(row: Mapping[str, Any]) -> str | None:
    """Why a campaign candidate is left out (the first reason that applies), or None."""
    if row["is_control"] or row["candidate__kind"] == CandidateKind.CONTROL:
        return "control"
    if row["dropped"]:
        return "dropped"
    if row["review_state"] in (ReviewState.OPEN, ReviewState.CLAIMED):
        return "under_review"
    if not row["is_finalised"]:
        if row["kept_judgments"] < row["quota"] and row["review_state"] != ReviewState.RESOLVED:
            return "below_quota"
        return "not_finalised"
    if row["overall"] is None or not 1 <= row["overall"] <= 5:
        return "no_valid_score"
    return None


def _number(value: float) -> str:
    return repr(float(value))


def _csv_string(value: str) -> str:
    return '"' + value.replace('"', '""') + '"'


def _compact(value: Any) -> str:
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def _rating(value: Any) -> int | float | None:
    if value is None:
        return None
    return int(value) if float(value).is_integer() else float(value)


class _Lines:
    """(JSONL line, CSV line) byte tuples of one split with a cursor's fetchmany/close."""

    def __init__(self, rows: Iterator[tuple[bytes, bytes]]) -> None:
        self._rows = rows

    def fetchmany(self, size: int) -> list[tuple[bytes, bytes]]:
        batch = []
        for row in self._rows:
            batch.append(row)
            if len(batch) >= size:
                break
        return batch

    def close(self) -> None:
        self._rows = iter(())


class PortableReleaseReads:
    """`ReleaseReads` in Python over the ORM, inside one transaction (SQLite serialises writers, so
    the reads are consistent)."""

    def __init__(self, *, tag: str, campaign_ids: Sequence[int]) -> None:
        self.tag = tag
        self.campaign_ids = sorted(campaign_ids)
        self.items: list[_Item] = []
        self.splits: dict[int, int] = {}  # clip pk -> split
        self.pseudonyms: dict[int, str] | None = None
        self._stack = ExitStack()

    def __enter__(self) -> PortableReleaseReads:
        self._stack.enter_context(transaction.atomic())
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self._stack.__exit__(exc_type, exc, traceback)

    def select_items(self) -> dict[str, Any]:
        per_campaign: dict[str, dict[str, int]] = {}
        slugs = dict(Campaign.objects.filter(pk__in=self.campaign_ids).values_list("pk", "slug"))
        for slug in sorted(slugs.values(), key=str.encode):
            per_campaign[slug] = dict.fromkeys((*EXCLUSION_REASONS, "released", "candidates"), 0)
        rows = CampaignCandidate.objects.filter(campaign_id__in=self.campaign_ids).values(
            "id",
            "campaign_id",
            "candidate_id",
            "clip_id",
            "overall",
            "training_class",
            "kept_judgments",
            "review_state",
            "means",
            "calibration__scores",
            "calibration__overall",
            "is_control",
            "dropped",
            "is_finalised",
            "quota",
            "candidate__kind",
        )
        for row in rows.order_by("id").iterator(chunk_size=2000):
            entry = per_campaign[slugs[row["campaign_id"]]]
            entry["candidates"] += 1
            reason = _reason(row)
            if reason:
                entry[reason] += 1
                continue
            entry["released"] += 1
            overall = float(row["overall"] or 0.0)  # not None: _reason checked it
            training_class = row["training_class"]
            if training_class is None:
                training_class = math.floor(overall + 0.5)
            self.items.append(
                _Item(
                    cc_id=row["id"],
                    campaign_id=row["campaign_id"],
                    candidate_id=row["candidate_id"],
                    clip_id=row["clip_id"],
                    overall=overall,
                    training_class=int(training_class),
                    kept_judgments=row["kept_judgments"],
                    review_state=row["review_state"],
                    means=row["means"] or {},
                    calibrated_scores=row["calibration__scores"] or {},
                    calibrated_overall=row["calibration__overall"],
                )
            )
        totals = {
            key: sum(entry[key] for entry in per_campaign.values())
            for key in (*EXCLUSION_REASONS, "released", "candidates")
        }
        return {
            "excluded": {reason: totals[reason] for reason in EXCLUSION_REASONS},
            "released": totals["released"],
            "candidates_in_campaigns": totals["candidates"],
            "per_campaign": per_campaign,
        }

    def question_keys(self) -> tuple[list[str], list[dict[str, Any]]]:
        keys: set[str] = set()
        described = []
        campaigns = sorted(
            Campaign.objects.filter(pk__in=self.campaign_ids), key=lambda c: c.slug.encode()
        )
        for campaign in campaigns:
            keys.update(campaign.question_keys)
            described.append(
                {
                    "slug": campaign.slug,
                    "name": campaign.name,
                    "questions": campaign.question_keys,
                    "overall": campaign.overall_question_key or "mean of the questions",
                    "judgments_per_candidate": campaign.judgments_per_candidate,
                    "reference_free": campaign.reference_free,
                    "is_imported": campaign.is_imported,
                    **campaign_rubric(rubric=campaign.rubric, questions=campaign.questions),
                    "quality_control": {
                        "qc_rules": campaign.qc_rules,
                        "review_range_threshold": campaign.review_range_threshold,
                        "control_rate": campaign.control_rate,
                        "control_settings": campaign.control_settings,
                        "min_seconds_on_clip": campaign.min_seconds_on_clip,
                        "reason_required_at_or_below": campaign.reason_required_at_or_below,
                    },
                }
            )
        return sorted(keys), described

    def assign_splits(self, *, seed: int, ratios: Sequence[float]) -> dict[str, Any]:
        per_clip: dict[int, list[int]] = defaultdict(lambda: [0, 0])
        for item in self.items:
            per_clip[item.clip_id][0] += 1
            per_clip[item.clip_id][1] += item.training_class
        vatex_ids = dict(Clip.objects.filter(pk__in=per_clip).values_list("pk", "vatex_id"))
        self.splits, described = splitting.assign(
            ((pk, vatex_ids[pk], count, class_sum) for pk, (count, class_sum) in per_clip.items()),
            seed=seed,
            ratios=ratios,
        )
        return described

    def check_values(self, *, include_raw_judgments: bool) -> None:
        clips = Clip.objects.filter(pk__in=self.splits).order_by("vatex_id")
        for vatex_id, *numbers in clips.values_list(
            "vatex_id", "start_seconds", "end_seconds", "duration"
        ):
            for number in numbers:
                if number is not None and (math.isnan(number) or abs(number) >= FLOAT_LIMIT):
                    raise ValueError(
                        f"clip {vatex_id}: start, end or duration is not a usable number"
                    )
        if include_raw_judgments:
            kept = Judgment.objects.filter(
                campaign_candidate_id__in=[item.cc_id for item in self.items], is_excluded=False
            )
            for pk, values in kept.values_list("pk", "values").iterator(chunk_size=2000):
                for value in values.values():
                    if not isinstance(value, int | float) or not float(value).is_integer():
                        raise ValueError(f"judgment {pk} has a rating that is not a whole number")

    def store_records(self, *, release_id: int) -> dict[int, dict[str, int]]:
        ReleaseRecord.objects.filter(release_id=release_id).delete()
        ReleaseRecord.objects.bulk_create(
            (
                ReleaseRecord(
                    release_id=release_id,
                    campaign_candidate_id=item.cc_id,
                    candidate_id=item.candidate_id,
                    clip_id=item.clip_id,
                    split=self.splits[item.clip_id],
                    overall=item.overall,
                    training_class=item.training_class,
                    kept_judgments=item.kept_judgments,
                )
                for item in self.items
            ),
            batch_size=2000,
        )
        per_split: dict[int, dict[str, Any]] = {}
        for item in self.items:
            entry = per_split.setdefault(
                self.splits[item.clip_id], {"candidates": 0, "clips": set()}
            )
            entry["candidates"] += 1
            entry["clips"].add(item.clip_id)
        return {
            split: {"candidates": entry["candidates"], "clips": len(entry["clips"])}
            for split, entry in per_split.items()
        }

    def worker_identities(self) -> dict[int, tuple[str, str]]:
        rows = Participation.objects.filter(campaign_id__in=self.campaign_ids).values_list(
            "worker_id", "worker__platform", "worker__external_id"
        )
        return {worker: (platform, external) for worker, platform, external in rows}

    def prepare_fragments(self, *, pseudonyms: dict[int, str] | None, schema: RecordSchema) -> None:
        self.pseudonyms = pseudonyms

    def split_lines(self, *, schema: RecordSchema, split: int, batch_size: int) -> _Lines:
        return _Lines(self._split_rows(schema=schema, split=split))

    def _split_rows(self, *, schema: RecordSchema, split: int) -> Iterator[tuple[bytes, bytes]]:
        items = [item for item in self.items if self.splits[item.clip_id] == split]
        clips = {clip.pk: clip for clip in Clip.objects.filter(pk__in={i.clip_id for i in items})}
        candidates = {
            candidate.pk: candidate
            for candidate in CandidateCaption.objects.filter(
                pk__in=[item.candidate_id for item in items]
            ).select_related("system")
        }
        slugs = dict(Campaign.objects.filter(pk__in=self.campaign_ids).values_list("pk", "slug"))
        references: dict[int, list[str]] = defaultdict(list)
        english = Q(language__iexact="en") | Q(language__istartswith="en-")
        for clip_pk, text in (
            ReferenceCaption.objects.filter(english, clip_id__in=clips)
            .order_by("clip_id", "position", "id")
            .values_list("clip_id", "text")
        ):
            references[clip_pk].append(text)
        raw: dict[int, list[dict[str, Any]]] = defaultdict(list)
        if schema.include_raw_judgments:
            assert self.pseudonyms is not None
            kept = Judgment.objects.filter(
                campaign_candidate_id__in=[item.cc_id for item in items], is_excluded=False
            ).order_by("pk")
            for cc_id, worker, values, reason in kept.values_list(
                "campaign_candidate_id", "participation__worker_id", "values", "reason"
            ):
                raw[cc_id].append(
                    {
                        "reason": reason,
                        "values": {key: _rating(values.get(key)) for key in schema.question_keys},
                        "worker": self.pseudonyms[worker],
                    }
                )

        def order(item: _Item) -> tuple[bytes, bytes, bytes]:
            return (
                clips[item.clip_id].vatex_id.encode(),
                candidates[item.candidate_id].external_id.encode(),
                slugs[item.campaign_id].encode(),
            )

        for item in sorted(items, key=order):
            clip = clips[item.clip_id]
            candidate = candidates[item.candidate_id]
            scores = {}
            for key in schema.question_keys:
                value = item.means.get(key)
                scores[key] = None if value is None else float(value)
            record: dict[str, Any] = {
                "campaign": slugs[item.campaign_id],
                "candidate_id": candidate.external_id,
                "clip_id": clip.vatex_id,
                "duration": float(
                    clip.duration
                    if clip.duration is not None
                    else clip.end_seconds - clip.start_seconds
                ),
                "end": float(clip.end_seconds),
                "frames_key": clip.frames_key,
                "judgments": item.kept_judgments,
                "normalized": (item.overall - 1) / 4,
                "overall": item.overall,
                "references": references[item.clip_id],
                "review_status": item.review_state or "none",
                "scores": scores,
                "start": float(clip.start_seconds),
                "system": candidate.system.name if candidate.system else "",
                "system_version": candidate.system.version if candidate.system else "",
                "text": candidate.text,
                "training_class": item.training_class,
                "video_key": clip.video_key,
            }
            if schema.include_raw_judgments:
                record["raw_judgments"] = raw[item.cc_id]
            if schema.include_calibration:
                record["calibrated_overall"] = item.calibrated_overall
                record["calibrated_scores"] = {
                    key: None
                    if item.calibrated_scores.get(key) is None
                    else float(item.calibrated_scores[key])
                    for key in schema.question_keys
                }
            cells: list[str] = []
            for name in schema.columns:
                value = record[name]
                if name in ("scores", "calibrated_scores"):
                    cells.extend("" if mean is None else _number(mean) for mean in value.values())
                elif value is None:
                    cells.append("")
                elif name in ("references", "raw_judgments"):
                    cells.append(_csv_string(_compact(value)))
                elif isinstance(value, str):
                    cells.append(_csv_string(value))
                elif isinstance(value, float):
                    cells.append(_number(value))
                else:
                    cells.append(str(value))
            yield canonical_line(record)[:-1].encode(), ",".join(cells).encode()

    def split_statistics(self, *, splits: int) -> dict[str, Any]:
        per_split: dict[int, dict[str, Any]] = {
            index: {
                "candidates": 0,
                "clips": set(),
                "sum": Decimal(0),
                "bins": [0] * 8,
                "classes": [0] * 5,
            }
            for index in range(splits)
        }
        per_clip: dict[int, int] = defaultdict(int)
        for item in self.items:
            entry = per_split[self.splits[item.clip_id]]
            entry["candidates"] += 1
            entry["clips"].add(item.clip_id)
            # PostgreSQL's float8 -> numeric keeps 15 significant digits; so does this.
            entry["sum"] += Decimal(format(item.overall, ".15g"))
            entry["bins"][min(max(math.floor((item.overall - 1) / 0.5), 0), 7)] += 1
            if 1 <= item.training_class <= 5:
                entry["classes"][item.training_class - 1] += 1
            per_clip[item.clip_id] += 1
        return {
            "splits": {
                index: {
                    "candidates": entry["candidates"],
                    "clips": len(entry["clips"]),
                    "mean_overall": float(
                        (entry["sum"] / entry["candidates"]).quantize(
                            Decimal("1e-12"), rounding=ROUND_HALF_UP
                        )
                    )
                    if entry["candidates"]
                    else None,
                    "bins": entry["bins"],
                    "classes": entry["classes"],
                }
                for index, entry in per_split.items()
            },
            "clips": len(per_clip),
            "per_clip_min": min(per_clip.values(), default=0),
            "per_clip_max": max(per_clip.values(), default=0),
        }

    def _kept(self) -> Iterator[tuple[int, int, int | None, dict[str, Any]]]:
        """(campaign candidate, worker, import batch, values) of the kept judgments, by candidate."""
        ids = [item.cc_id for item in self.items]
        for start in range(0, len(ids), 2000):
            yield from (
                Judgment.objects.filter(campaign_candidate_id__in=ids[start : start + 2000])
                .filter(is_excluded=False)
                .order_by("campaign_candidate_id", "pk")
                .values_list(
                    "campaign_candidate_id", "participation__worker_id", "import_batch_id", "values"
                )
            )

    def judgments_and_agreement(
        self, *, question_keys: Sequence[str], batch_size: int
    ) -> tuple[dict[str, Any], dict[str, dict[str, Any]]]:
        per_item: dict[int, int] = dict.fromkeys((item.cc_id for item in self.items), 0)
        workers: set[int] = set()
        counts: dict[int, np.ndarray] = {}
        judgments = 0
        for cc_id, worker, _, values in self._kept():
            judgments += 1
            per_item[cc_id] += 1
            workers.add(worker)
            table = counts.setdefault(cc_id, np.zeros((len(question_keys), 5), dtype=np.int64))
            for index, key in enumerate(question_keys):
                value = values.get(key)
                if isinstance(value, int | float) and float(value) in RATING_VALUES:
                    table[index, int(value) - 1] += 1
        batches = sorted(
            set(
                Judgment.objects.filter(campaign_id__in=self.campaign_ids, is_excluded=False)
                .exclude(import_batch=None)
                .values_list("import_batch_id", flat=True)
                .distinct()
            )
        )
        statistics = {
            "judgments": judgments,
            "annotators": len(workers),
            "imported_rater_slots": Worker.objects.filter(
                pk__in=workers, platform=Platform.IMPORTED
            ).count(),
            "judgments_per_candidate_min": min(per_item.values(), default=0),
            "judgments_per_candidate_max": max(per_item.values(), default=0),
            "judgment_import_batches": batches,
        }
        tables = (
            np.stack(list(counts.values()))
            if counts
            else np.zeros((0, len(question_keys), 5), dtype=np.int64)
        )
        return statistics, accumulate_coincidence([tables], question_keys=question_keys)

    def sources(self, *, judgment_batches: Sequence[int]) -> list[dict[str, str]]:
        clip_ids = list(self.splits)
        batch_ids = set(judgment_batches)
        batch_ids.update(
            Clip.objects.filter(pk__in=clip_ids)
            .exclude(import_batch=None)
            .values_list("import_batch_id", flat=True)
        )
        batch_ids.update(
            ReferenceCaption.objects.filter(clip_id__in=clip_ids)
            .exclude(import_batch=None)
            .values_list("import_batch_id", flat=True)
        )
        batch_ids.update(
            CandidateCaption.objects.filter(pk__in=[item.candidate_id for item in self.items])
            .exclude(import_batch=None)
            .values_list("import_batch_id", flat=True)
        )
        rows = ImportBatch.objects.filter(pk__in=batch_ids).values_list(
            "kind", "file_name", "sha256"
        )
        return [
            {"kind": kind, "file_name": file_name, "sha256": sha256}
            for kind, file_name, sha256 in sorted(
                rows, key=lambda row: (row[0].encode(), row[1].encode(), row[2])
            )
        ]

    def exclusions(self) -> dict[str, Any]:
        slugs = dict(Campaign.objects.filter(pk__in=self.campaign_ids).values_list("pk", "slug"))
        active = WorkerExclusion.objects.filter(reversed_at=None)
        participations = Participation.objects.filter(campaign_id__in=self.campaign_ids).filter(
            Q(status=ParticipationStatus.EXCLUDED) | Q(pk__in=active.values("participation_id"))
        )
        workers = []
        for participation in participations:
            mine = active.filter(participation=participation)
            rules = sorted(
                {
                    rule
                    for rules in mine.values_list("rules", flat=True)
                    if isinstance(rules, list)
                    for rule in rules
                }
            )
            excluded = Judgment.objects.filter(participation=participation, is_excluded=True)
            workers.append(
                {
                    "campaign": slugs[participation.campaign_id],
                    "worker_pk": participation.worker_id,
                    "participation_excluded": participation.status == ParticipationStatus.EXCLUDED,
                    "rules": rules,
                    "by_curator": mine.exclude(created_by=None).exists(),
                    "judgments_excluded": excluded.count(),
                    "reasons": sorted(
                        {
                            reason[:300]
                            for reason in excluded.values_list("exclusion_reason", flat=True)
                            if reason
                        }
                    ),
                }
            )
        judgment_exclusions: dict[str, dict[str, int]] = {}
        for campaign_id, excluded_by in Judgment.objects.filter(
            campaign_id__in=self.campaign_ids, is_excluded=True
        ).values_list("campaign_id", "excluded_by"):
            entry = judgment_exclusions.setdefault(slugs[campaign_id], {})
            key = excluded_by or "unspecified"
            entry[key] = entry.get(key, 0) + 1
        audit: dict[str, dict[str, int]] = {}
        for campaign_id, action in AuditEntry.objects.filter(
            campaign_id__in=self.campaign_ids
        ).values_list("campaign_id", "action"):
            entry = audit.setdefault(slugs[campaign_id], {})
            entry[action] = entry.get(action, 0) + 1
        return {
            "workers": workers,
            "judgment_exclusions": _sorted_nested(judgment_exclusions),
            "audit": _sorted_nested(audit),
        }


def _sorted_nested(mapping: dict[str, dict[str, int]]) -> dict[str, dict[str, int]]:
    return {
        outer: dict(sorted(inner.items(), key=lambda pair: pair[0].encode()))
        for outer, inner in sorted(mapping.items(), key=lambda pair: pair[0].encode())
    }
