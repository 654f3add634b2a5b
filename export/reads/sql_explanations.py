"""PostgreSQL release reads, explanations: every kept judgment of a released candidate that has a
free-text reason, with the worker's ratings, in file order (split, then the split files' order),
for `export.explanations`. Only when raw judgments are included (the pseudonyms table exists)."""

from __future__ import annotations

from typing import Any

from export.reads.sql_snapshot import (
    T_CAMPAIGN,
    T_CLIP,
    T_JUDGMENT,
    T_PARTICIPATION,
    ReleaseSnapshot,
)


def explanation_rows(snapshot: ReleaseSnapshot, *, batch_size: int) -> Any:
    """A named cursor over (split, ord, campaign slug, reason threshold, clip id, candidate id,
    text, overall, ratings as JSON text, reason, worker pseudonym as JSON text)."""
    with snapshot.cursor() as settings_cursor:
        # The split lines turn these off for their own statement (`sql_lines.split_lines`).
        for setting in ("enable_hashjoin", "enable_mergejoin", "enable_sort"):
            settings_cursor.execute(f"SET LOCAL {setting} = on")
    cursor = snapshot.named_cursor("export_explanations", batch_size)
    cursor.execute(
        f"""
        SELECT o.split, o.ord, o.slug, camp.reason_required_at_or_below, c.vatex_id,
               o.external_id, o.text, o.overall, j.values::text, j.reason, ps.json
        FROM {snapshot.ordered} o
          JOIN {T_JUDGMENT} j ON j.campaign_candidate_id = o.cc_id
          JOIN {T_PARTICIPATION} p ON p.id = j.participation_id
          JOIN {snapshot.pseudonyms} ps ON ps.worker_id = p.worker_id
          JOIN {T_CAMPAIGN} camp ON camp.slug = o.slug
          JOIN {T_CLIP} c ON c.id = o.clip_id
        WHERE NOT j.is_excluded AND btrim(j.reason) <> ''
        ORDER BY o.split, o.ord, j.id
        """
    )
    return cursor
