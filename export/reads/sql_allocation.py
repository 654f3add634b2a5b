"""PostgreSQL release reads, allocation (issue 28): why each released candidate stopped getting
judgments, and what the card says about each campaign's allocation policy.

Adaptive campaigns store `CampaignCandidate.stop_reason` ("settled", "maximum", "review") and
`opened_by` as the slot engine decides. Fixed campaigns store nothing (no extra write on the submit
path), so the build derives their reason here, with the policy's own rule:
`allocation_decide(FixedPolicy(judgments=<the candidate's quota>, review_range_threshold=<the
campaign's>), <kept ratings>)`. The fixed policy reads only how many kept ratings a candidate has
and their range, and the aggregation has already written both (`kept_judgments`, and
`rating_range`, the largest max − min over the questions, the review queue's own measure), so the
rule is evaluated once per distinct (campaign, quota, kept judgments, range) — a handful of
combinations, whatever the size of the release — and the result joined to the candidates in SQL:
no scan of the judgments, no query per row. Every kept judgment rates every question of its
campaign, so each question has `kept_judgments` ratings, and the combined decision over the
questions (`decisions_combine`) is the decision on the largest range.

A candidate of an adaptive campaign with no stored reason keeps "": the adaptive rule also reads
signals the build does not have (standard errors, the metric's score at the time), and guessing
them would describe the dataset less honestly than saying nothing.
"""

from __future__ import annotations

import json
from typing import Any

from psycopg2.extras import execute_values

from annotation.allocation import (
    AdaptivePolicy,
    FixedPolicy,
    allocation_decide,
    policy_from_dict,
)
from export.reads.sql_snapshot import T_CAMPAIGN, ReleaseSnapshot

STOP_REASONS = ("settled", "maximum", "review")
OPENED_BY = ("range", "standard_error", "metric")
# A campaign whose `allocation` is {} (the default) or names the fixed policy.
_FIXED = "(camp.allocation = '{}'::jsonb OR camp.allocation->>'kind' = 'fixed')"


def representative_ratings(count: int, spread: int) -> list[int]:
    """`count` ratings whose range is `spread` (the fixed policy reads nothing else of them)."""
    if count == 0:
        return []
    if count == 1:
        return [1]
    return [1] * (count - 1) + [1 + spread]


def derive_stop_reasons(snapshot: ReleaseSnapshot) -> None:
    """Create the `decisions` table: (campaign, quota, kept judgments, range) -> stop reason for
    the released candidates of fixed campaigns that have none stored (module docstring)."""
    with snapshot.cursor() as cursor:
        cursor.execute(
            f"""
            SELECT DISTINCT i.campaign_id, i.quota, camp.review_range_threshold,
                   i.kept_judgments, COALESCE(i.rating_range, 0)
            FROM {snapshot.items} i JOIN {T_CAMPAIGN} camp ON camp.id = i.campaign_id
            WHERE i.stop_reason = '' AND {_FIXED}
            """
        )
        combinations = cursor.fetchall()
        cursor.execute(
            f"CREATE TEMP TABLE {snapshot.decisions} (campaign_id bigint, quota int,"
            " kept_judgments int, rating_range int, stop_reason text NOT NULL,"
            " PRIMARY KEY (campaign_id, quota, kept_judgments, rating_range)) ON COMMIT DROP"
        )
        rows = []
        for campaign_id, quota, threshold, kept, spread in combinations:
            policy = FixedPolicy(judgments=quota, review_range_threshold=threshold)
            decision = allocation_decide(policy, representative_ratings(kept, spread))
            rows.append((campaign_id, quota, kept, spread, decision.reason or ""))
        if rows:
            execute_values(cursor, f"INSERT INTO {snapshot.decisions} VALUES %s", rows)
        cursor.execute(f"ANALYZE {snapshot.decisions}")


def stop_reason_sql(snapshot: ReleaseSnapshot, *, items: str = "i") -> tuple[str, str]:
    """(a join on the `decisions` table, the candidate's stop reason expression) for a query over
    the items table aliased `items`: the stored reason, else the derived one, else ""."""
    join = (
        f"LEFT JOIN {snapshot.decisions} d ON d.campaign_id = {items}.campaign_id"
        f" AND d.quota = {items}.quota AND d.kept_judgments = {items}.kept_judgments"
        f" AND d.rating_range = COALESCE({items}.rating_range, 0)"
    )
    return join, f"COALESCE(NULLIF({items}.stop_reason, ''), d.stop_reason, '')"


def describe_policy(
    *, allocation: dict[str, Any], judgments_per_candidate: int, review_range_threshold: int
) -> dict[str, Any]:
    """The campaign's policy with every parameter spelled out: {} is the fixed policy with the
    campaign's N; a stored policy is read by `policy_from_dict` (ValueError if it is not one)."""
    policy: FixedPolicy | AdaptivePolicy
    if allocation:
        policy = policy_from_dict(allocation)
    else:
        policy = FixedPolicy(
            judgments=judgments_per_candidate, review_range_threshold=review_range_threshold
        )
    return policy.as_dict()


def allocation_facts(snapshot: ReleaseSnapshot) -> list[dict[str, Any]]:
    """Per campaign (by slug): its policy, its metric, and how many released candidates stopped
    for each reason ("open": still wanting judgments, e.g. resolved by an expert first) and how
    many had slots opened by each rule."""
    join, reason = stop_reason_sql(snapshot)
    reason_counts = ", ".join(
        f"count(i.cc_id) FILTER (WHERE {reason} = '{name}')" for name in (*STOP_REASONS, "")
    )
    opened_counts = ", ".join(
        f"count(i.cc_id) FILTER (WHERE i.opened_by ? '{name}')" for name in OPENED_BY
    )
    with snapshot.cursor() as cursor:
        cursor.execute(
            f"""
            SELECT camp.slug, camp.allocation::text, camp.metric, camp.judgments_per_candidate,
                   camp.review_range_threshold,
                   {reason_counts}, {opened_counts}
            FROM {T_CAMPAIGN} camp LEFT JOIN {snapshot.items} i ON i.campaign_id = camp.id
              {join}
            WHERE camp.id = ANY(%s)
            GROUP BY camp.id ORDER BY camp.slug COLLATE "C"
            """,
            [snapshot.campaign_ids],
        )
        rows = cursor.fetchall()
    facts = []
    for slug, allocation, metric, per_candidate, threshold, *counts in rows:
        reasons = dict(zip((*STOP_REASONS, "open"), counts[:4], strict=True))
        opened = dict(zip(OPENED_BY, counts[4:], strict=True))
        facts.append(
            {
                "campaign": slug,
                "policy": describe_policy(
                    allocation=json.loads(allocation),
                    judgments_per_candidate=per_candidate,
                    review_range_threshold=threshold,
                ),
                "metric": metric,
                "stop_reasons": {name: int(count) for name, count in reasons.items()},
                "opened_by": {name: int(count) for name, count in opened.items()},
            }
        )
    return facts
