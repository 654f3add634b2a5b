"""A release's manifest.json: the record of everything in it (seed, ratios, selection rule and
counts, statistics, quality-control rules and exclusions, review decisions, sources, code version)
and the sha256 of every other file. Canonical JSON (sorted keys, two-space indent, final newline),
so the same release state always gives the same bytes."""

from __future__ import annotations

from pathlib import Path

from export.records import canonical_json, sha256_file
from export.release_facts import ReleaseFacts

FORMAT_VERSION = 1
SELECTION_RULE = (
    "a candidate is released when it is not a control, not dropped, not waiting "
    "for review, finalised (kept judgments >= quota, or resolved by review) and scored"
)
PSEUDONYM_RULE = (
    "w_ + the first 16 hex digits of HMAC-SHA256(key, '<platform>:<worker id>')"
    " with the deployment's release pseudonym key; stable across releases"
)


def write_manifest(*, facts: ReleaseFacts, files: dict[str, str], root: Path) -> str:
    """Write manifest.json under `root`, listing `files` ({relative path: sha256}); its sha256."""
    release = facts.release
    selection = facts.selection
    manifest = {
        "dataset": "Vid-Lepus",
        "format_version": FORMAT_VERSION,
        "name": release.name,
        "seed": release.seed,
        "ratios": facts.ratios,
        "split_method": facts.split_method,
        "campaigns": facts.campaigns,
        "allocation": facts.allocation,
        "question_keys": facts.question_keys,
        "selection": {
            "candidates_in_campaigns": selection["candidates_in_campaigns"],
            "released": selection["released"],
            "excluded": selection["excluded"],
            "per_campaign": selection["per_campaign"],
            "rule": SELECTION_RULE,
        },
        "splits": facts.counts["splits"],
        "statistics": facts.stats,
        "quality_control": {
            "excluded_workers": facts.excluded_workers,
            "judgment_exclusions": facts.judgment_exclusions,
        },
        "review": {
            "decisions": facts.review_decisions,
            "actions_by_campaign": facts.review_by_campaign,
        },
        "include_raw_judgments": release.include_raw_judgments,
        "pseudonyms": PSEUDONYM_RULE,
        "sources": facts.sources,
        "calibration": facts.calibration,
        "retest": facts.retest,
        "license": facts.license_ids,
        "licenses": [row.as_dict() for row in facts.licences],
        "code_version": facts.code_version,
        "files": dict(sorted(files.items())),
    }
    (root / "manifest.json").write_bytes(canonical_json(manifest).encode("utf-8"))
    return sha256_file(root / "manifest.json")
