"""PostgreSQL release reads, the manifest's facts: the campaigns and their questions, who took
part, where the data came from, and what quality control excluded."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from export.reads.protocol import campaign_rubric
from export.reads.sql_snapshot import (
    T_AUDIT,
    T_BATCH,
    T_CAMPAIGN,
    T_CAND,
    T_CLIP,
    T_EXCLUSION,
    T_JUDGMENT,
    T_PARTICIPATION,
    T_REF,
    T_WORKER,
    ReleaseSnapshot,
)


def question_keys(snapshot: ReleaseSnapshot) -> tuple[list[str], list[dict[str, Any]]]:
    """The union of the campaigns' question keys, and each campaign's QC facts for the manifest."""
    with snapshot.cursor() as cursor:
        cursor.execute(
            f"""
            SELECT slug, name, questions::text, overall_question_key, judgments_per_candidate,
                   reference_free, control_rate, control_settings::text, qc_rules::text,
                   review_range_threshold, min_seconds_on_clip, reason_required_at_or_below,
                   is_imported, rubric
            FROM {T_CAMPAIGN} WHERE id = ANY(%s) ORDER BY slug COLLATE "C"
            """,
            [snapshot.campaign_ids],
        )
        rows = cursor.fetchall()
    keys: set[str] = set()
    described = []
    for (
        slug,
        name,
        questions,
        overall_key,
        quota,
        reference_free,
        control_rate,
        control_settings,
        qc_rules,
        review_threshold,
        min_seconds,
        reason_at_or_below,
        is_imported,
        rubric,
    ) in rows:
        campaign_questions = json.loads(questions)
        campaign_keys = [question["key"] for question in campaign_questions]
        keys.update(campaign_keys)
        described.append(
            {
                "slug": slug,
                "name": name,
                "questions": campaign_keys,
                "overall": overall_key or "mean of the questions",
                "judgments_per_candidate": quota,
                "reference_free": reference_free,
                "is_imported": is_imported,
                **campaign_rubric(rubric=rubric, questions=campaign_questions),
                "quality_control": {
                    "qc_rules": json.loads(qc_rules),
                    "review_range_threshold": review_threshold,
                    "control_rate": control_rate,
                    "control_settings": json.loads(control_settings),
                    "min_seconds_on_clip": min_seconds,
                    "reason_required_at_or_below": reason_at_or_below,
                },
            }
        )
    return sorted(keys), described


def worker_identities(snapshot: ReleaseSnapshot) -> dict[int, tuple[str, str]]:
    """worker pk -> (platform, external id) of everyone who took part in the campaigns."""
    with snapshot.cursor() as cursor:
        cursor.execute(
            f"""
            SELECT DISTINCT w.id, w.platform, w.external_id
            FROM {T_WORKER} w JOIN {T_PARTICIPATION} p ON p.worker_id = w.id
            WHERE p.campaign_id = ANY(%s)
            """,
            [snapshot.campaign_ids],
        )
        return {int(pk): (platform, external) for pk, platform, external in cursor.fetchall()}


def sources(snapshot: ReleaseSnapshot, *, judgment_batches: Sequence[int]) -> list[dict[str, str]]:
    """Import batches the released clips, references, candidates and judgments came from."""
    with snapshot.cursor() as cursor:
        cursor.execute(
            f"""
            SELECT ib.kind, ib.file_name, ib.sha256 FROM {T_BATCH} ib WHERE ib.id IN (
              SELECT c.import_batch_id FROM {snapshot.clips} s JOIN {T_CLIP} c ON c.id = s.clip_id
              UNION SELECT r.import_batch_id FROM {snapshot.clips} s
                JOIN {T_REF} r ON r.clip_id = s.clip_id
              UNION SELECT cand.import_batch_id FROM {snapshot.items} i
                JOIN {T_CAND} cand ON cand.id = i.candidate_id
              UNION SELECT unnest(%s::bigint[]))
            ORDER BY ib.kind COLLATE "C", ib.file_name COLLATE "C", ib.sha256
            """,
            [list(judgment_batches)],
        )
        return [
            {"kind": kind, "file_name": file_name, "sha256": sha256}
            for kind, file_name, sha256 in cursor.fetchall()
        ]


def exclusions(snapshot: ReleaseSnapshot) -> dict[str, Any]:
    """Excluded workers (by worker pk, to be pseudonymised), judgment exclusions and review
    decisions of the campaigns."""
    with snapshot.cursor() as cursor:
        cursor.execute(
            f"""
            SELECT camp.slug, p.worker_id, p.status = 'excluded',
                   COALESCE((SELECT array_agg(DISTINCT rule)
                             FROM {T_EXCLUSION} we, jsonb_array_elements_text(
                               CASE WHEN jsonb_typeof(we.rules) = 'array' THEN we.rules
                                    ELSE '[]'::jsonb END) rule
                             WHERE we.participation_id = p.id AND we.reversed_at IS NULL), '{{}}'),
                   EXISTS (SELECT 1 FROM {T_EXCLUSION} we WHERE we.participation_id = p.id
                           AND we.reversed_at IS NULL AND we.created_by_id IS NOT NULL),
                   (SELECT count(*) FROM {T_JUDGMENT} j
                     WHERE j.participation_id = p.id AND j.is_excluded),
                   COALESCE((SELECT array_agg(DISTINCT left(j.exclusion_reason, 300))
                             FROM {T_JUDGMENT} j WHERE j.participation_id = p.id
                             AND j.is_excluded AND j.exclusion_reason <> ''), '{{}}')
            FROM {T_PARTICIPATION} p JOIN {T_CAMPAIGN} camp ON camp.id = p.campaign_id
            WHERE p.campaign_id = ANY(%(campaigns)s) AND (p.status = 'excluded' OR EXISTS (
                  SELECT 1 FROM {T_EXCLUSION} we
                  WHERE we.participation_id = p.id AND we.reversed_at IS NULL))
            """,
            {"campaigns": snapshot.campaign_ids},
        )
        workers = [
            {
                "campaign": slug,
                "worker_pk": int(worker_pk),
                "participation_excluded": bool(is_excluded),
                "rules": sorted(rules),
                "by_curator": bool(by_curator),
                "judgments_excluded": int(judgments_excluded),
                "reasons": sorted(reasons),
            }
            for slug, worker_pk, is_excluded, rules, by_curator, judgments_excluded, reasons in (
                cursor.fetchall()
            )
        ]
        cursor.execute(
            f"""
            SELECT camp.slug, j.excluded_by, count(*)
            FROM {T_JUDGMENT} j JOIN {T_CAMPAIGN} camp ON camp.id = j.campaign_id
            WHERE j.campaign_id = ANY(%s) AND j.is_excluded
            GROUP BY camp.slug, j.excluded_by
            ORDER BY camp.slug COLLATE "C", j.excluded_by COLLATE "C"
            """,
            [snapshot.campaign_ids],
        )
        judgment_exclusions: dict[str, dict[str, int]] = {}
        for slug, excluded_by, count in cursor.fetchall():
            judgment_exclusions.setdefault(slug, {})[excluded_by or "unspecified"] = int(count)
        cursor.execute(
            f"""
            SELECT camp.slug, ae.action, count(*)
            FROM {T_AUDIT} ae JOIN {T_CAMPAIGN} camp ON camp.id = ae.campaign_id
            WHERE ae.campaign_id = ANY(%s)
            GROUP BY camp.slug, ae.action ORDER BY camp.slug COLLATE "C", ae.action COLLATE "C"
            """,
            [snapshot.campaign_ids],
        )
        audit: dict[str, dict[str, int]] = {}
        for slug, action, count in cursor.fetchall():
            audit.setdefault(slug, {})[action] = int(count)
    return {"workers": workers, "judgment_exclusions": judgment_exclusions, "audit": audit}
