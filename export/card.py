"""A release's dataset card (README.md): Hugging Face front matter, what the release holds, its
statistics, and how to load it; and the VATEX-EVAL notice it refers to when that data is in.

The card is Markdown rendered with autoescape off (HTML escaping would garble Markdown), so text a
person typed goes through `markdown_text` first: the release name cannot add links, HTML, headings
or other Markdown to the card. Everything else in it is numbers, slugs or fixed text.
"""

from __future__ import annotations

import json
import shutil
import unicodedata
from pathlib import Path
from typing import Any

from django.conf import settings
from django.template.loader import render_to_string

from annotation.questions import Rubric
from export.licences import CODE_LICENSE
from export.reads.reasons import exclusion_label
from export.reads.sql_allocation import OPENED_BY, STOP_REASONS
from export.records import sha256_file
from export.release_facts import ReleaseFacts
from export.statistics import SCORE_BINS

VATEX_EVAL_NOTICE = Path(settings.BASE_DIR) / "data" / "vatex_eval" / "NOTICE.md"

# Backslash-escaped in free text: every ASCII character with a meaning inside a Markdown line in
# CommonMark or GitHub's and Hugging Face's extensions (emphasis, code, links and images, raw
# HTML and autolinks, entities, heading closers, tables, strikethrough, math; ":", "." and "@" so
# that no bare URL, "www." or e-mail address is linked). CommonMark renders an escaped character
# as itself. "_" between two letters or digits is left as it is: it cannot start or end emphasis
# there, and slugs (so default release names) are full of them.
MARKDOWN_ESCAPED = frozenset("\\`*_[]<>&#|~$!:.@")


def single_line(text: str) -> str:
    """`text` with line breaks and other control characters as spaces: a Markdown or YAML line
    cannot be ended early from inside it."""
    return "".join(
        " " if unicodedata.category(char) in ("Cc", "Zl", "Zp") else char for char in text
    )


def markdown_text(text: str) -> str:
    """`text` as literal Markdown inline text: shown as typed, never interpreted."""
    line = single_line(text)
    escaped = []
    for index, char in enumerate(line):
        intraword = (
            char == "_"
            and 0 < index < len(line) - 1
            and line[index - 1].isalnum()
            and line[index + 1].isalnum()
        )
        escaped.append("\\" + char if char in MARKDOWN_ESCAPED and not intraword else char)
    return "".join(escaped)


# What each rubric means, for the card's "Rating guide" section (annotation.questions).
RUBRIC_NOTES = {
    Rubric.PAPER: "one description per level for all questions together (objects, "
    "relationships, accuracy and grammar), shown to workers under every question, as in the Rigel "
    "paper's Appendix C; Vid-Lepus was collected with it.",
    Rubric.PER_CRITERION: "each question has its own level descriptions, about what it alone "
    "asks (e.g. fluency judges the language only); the wording is Lepus's own, not the Rigel "
    "paper's.",
    Rubric.CUSTOM: "levels that the campaign's curator wrote for each question.",
    Rubric.IMPORTED: "judgments imported from a file, rated under their source's own "
    "instructions (no Lepus rubric was shown).",
}
RUBRIC_NAMES = {
    Rubric.PAPER: "the Rigel paper's (Appendix C, holistic)",
    Rubric.PER_CRITERION: "per-criterion (Lepus's own wording)",
    Rubric.CUSTOM: "custom",
    Rubric.IMPORTED: "imported (the source's own)",
}


def rubric_rows(campaigns: list[dict[str, Any]]) -> tuple[list[tuple[str, str, str]], list[str]]:
    """(campaign, rubric, questions) per campaign, and the note of each rubric used, in the
    order of the rubric choices."""
    rows = [
        (
            f"`{campaign['slug']}`",
            RUBRIC_NAMES[Rubric(campaign["rubric"])],
            ", ".join(campaign["questions"]),
        )
        for campaign in campaigns
    ]
    used = {campaign["rubric"] for campaign in campaigns}
    notes = [
        f"{RUBRIC_NAMES[rubric][0].upper()}{RUBRIC_NAMES[rubric][1:]}: {RUBRIC_NOTES[rubric]}"
        for rubric in Rubric
        if rubric in used
    ]
    return rows, notes


def write_card(*, facts: ReleaseFacts, root: Path) -> dict[str, str]:
    """Write README.md (and NOTICE.md with VATEX-EVAL data) under `root`; {relative path: sha256}."""
    files = {}
    if facts.includes_vatex_eval:
        shutil.copyfile(VATEX_EVAL_NOTICE, root / "NOTICE.md")
        files["NOTICE.md"] = sha256_file(root / "NOTICE.md")
    card = render_to_string("export/dataset_card.md", card_context(facts))
    (root / "README.md").write_bytes(card.encode("utf-8"))
    files["README.md"] = sha256_file(root / "README.md")
    return files


def _fixed(value: float | None, digits: int) -> str:
    return "n/a" if value is None else f"{value:.{digits}f}"


Row = tuple[str, ...]


def _statistics_rows(stats: dict[str, Any]) -> list[Row]:
    return [
        ("Clips (videos and still images)", str(stats["clips"])),
        # Releases built before still images existed hold videos only.
        ("Video clips", str(stats.get("video_clips", stats["clips"]))),
        ("Still images", str(stats.get("images", 0))),
        ("Candidate captions", str(stats["candidates"])),
        ("Candidates per clip (min)", str(stats["candidates_per_clip"]["min"])),
        ("Candidates per clip (max)", str(stats["candidates_per_clip"]["max"])),
        ("Candidates per clip (mean)", _fixed(stats["candidates_per_clip"]["mean"], 2)),
        ("Candidate vocabulary (words)", str(stats["candidate_words"]["vocabulary"])),
        ("Candidate total words", str(stats["candidate_words"]["total"])),
        ("Candidate mean length (words)", _fixed(stats["candidate_words"]["mean_length"], 2)),
        ("Reference captions", str(stats["references"])),
        ("Reference vocabulary (words)", str(stats["reference_words"]["vocabulary"])),
        ("Reference total words", str(stats["reference_words"]["total"])),
        ("Reference mean length (words)", _fixed(stats["reference_words"]["mean_length"], 2)),
        ("Vocabulary of all captions (words)", str(stats["vocabulary_all_captions"])),
        ("Judgments (kept)", str(stats["judgments"])),
        ("Judgments per candidate (mean)", _fixed(stats["judgments_per_candidate"]["mean"], 2)),
        ("Judgments per candidate (min)", str(stats["judgments_per_candidate"]["min"])),
        ("Judgments per candidate (max)", str(stats["judgments_per_candidate"]["max"])),
        ("Annotators", str(stats["annotators"])),
    ]


def _split_tables(facts: ReleaseFacts) -> dict[str, list[Row]]:
    """The per-split tables: sizes and mean score, the score histogram, the class histogram."""
    stats, split_names, ratios = facts.stats, facts.split_names, facts.ratios
    splits = stats["splits"]
    return {
        "split_rows": [
            (
                name,
                str(splits[name]["clips"]),
                str(splits[name]["candidates"]),
                _fixed(splits[name]["mean_overall"], 4),
                f"{ratios[name]!r}",
            )
            for name in split_names
        ],
        "histogram_rows": [
            (label, *[str(splits[name]["overall_histogram"][label]) for name in split_names])
            for label in SCORE_BINS
        ],
        "class_rows": [
            (
                str(value),
                *[str(splits[name]["class_histogram"][str(value)]) for name in split_names],
            )
            for value in range(1, 6)
        ],
    }


def _calibration_rows(calibration: list[dict[str, Any]]) -> list[Row]:
    return [
        (
            entry["campaign"],
            key,
            str(fit["judgments"]),
            str(fit["raters"]),
            str(fit["items"]),
            _fixed(fit["severity_sd"], 3),
            _fixed(fit["severity_reliability"], 3),
            f"{_fixed(fit['infit_mean_square'], 3)} / {_fixed(fit['outfit_mean_square'], 3)}",
            ", ".join(_fixed(value, 3) for value in fit["thresholds"]),
            _fixed(fit["log_likelihood"], 1),
            _fixed(fit["calibrated_vs_raw_correlation"], 4),
            "yes" if fit["converged"] else "no",
        )
        for entry in calibration
        for key, fit in entry["questions"].items()
    ]


def _retest_tables(retest: list[dict[str, Any]]) -> dict[str, list[Row]]:
    """Test-retest agreement: per question, and per campaign."""
    return {
        "retest_rows": [
            (
                entry["campaign"],
                key,
                f"{entry['retest_share']:.0%}",
                str(entry["retest_min_gap"]),
                str(fit["pairs"]),
                _fixed(fit["worker_kappa_mean"], 3),
                _fixed(fit["worker_kappa_median"], 3),
                _fixed(fit["pooled_kappa"], 3),
                _fixed(fit["exact_agreement"], 3),
            )
            for entry in retest
            for key, fit in entry["questions"].items()
        ],
        "retest_campaigns": [
            (
                entry["campaign"],
                str(entry["repeats_submitted"]),
                str(entry["workers_with_pairs"]),
                str(entry["workers_with_enough_pairs"]),
                str(entry["min_pairs"]),
                _fixed(entry["worker_kappa_mean"], 3),
                _fixed(entry["worker_kappa_median"], 3),
                _fixed(entry["pooled_kappa"], 3),
            )
            for entry in retest
        ],
    }


def policy_parameters(policy: dict[str, Any]) -> str:
    """A campaign's allocation policy (`AdaptivePolicy.as_dict()` / `FixedPolicy.as_dict()`
    shape) in words, every parameter stated."""
    review = f"review at a rating range of {policy['review_range_threshold']} or more"
    if policy["kind"] == "fixed":
        return f"{policy['judgments']} judgments per candidate; {review}"
    rules = []
    if policy["disagreement_range"] is not None:
        rules.append(f"the kept ratings' range is {policy['disagreement_range']} or more")
    if policy["standard_error_threshold"] is not None:
        rules.append(
            f"the calibrated score's standard error is above {policy['standard_error_threshold']!r}"
        )
    if policy["metric_disagreement_threshold"] is not None:
        rules.append(
            "the metric's score is further from the crowd's mean than "
            f"{policy['metric_disagreement_threshold']!r} plus the metric's uncertainty"
        )
    more = "; one more at a time while " + " or ".join(rules) if rules else "; no rule adds more"
    return f"minimum {policy['minimum']}, maximum {policy['maximum']}{more}; {review}"


def _allocation_tables(allocation: list[dict[str, Any]]) -> dict[str, list[Row]]:
    """Per campaign: the policy and its parameters, and the stop reasons of its candidates."""
    return {
        "allocation_rows": [
            (
                f"`{entry['campaign']}`",
                entry["policy"]["kind"],
                policy_parameters(entry["policy"]),
                f"`{entry['metric']}`" if entry["metric"] else "none",
            )
            for entry in allocation
        ],
        "stop_reason_rows": [
            (
                f"`{entry['campaign']}`",
                *(str(entry["stop_reasons"][name]) for name in STOP_REASONS),
                str(entry["stop_reasons"]["open"]),
                *(str(entry["opened_by"][name]) for name in OPENED_BY),
            )
            for entry in allocation
        ],
    }


def card_context(facts: ReleaseFacts) -> dict[str, Any]:
    """The template's context. Numbers are pre-formatted as strings, so the card never depends on
    localisation settings; the release name, the one free text a curator types, is escaped."""
    stats = facts.stats
    campaign_rubric_rows, rubric_notes = rubric_rows(facts.campaigns)
    return {
        "rubric_rows": campaign_rubric_rows,
        "facts_explanations": facts.explanations,
        "rubric_notes": rubric_notes,
        **_retest_tables(facts.retest),
        **_allocation_tables(facts.allocation),
        "adaptive": facts.adaptive,
        "calibration_rows": _calibration_rows(facts.calibration),
        "release": facts.release,
        "name_markdown": markdown_text(facts.release.name),
        "pretty_name_yaml": json.dumps(
            f"Vid-Lepus: {single_line(facts.release.name)}", ensure_ascii=False
        ),
        "license_ids": facts.license_ids,
        "licences": [row.as_dict() for row in facts.licences],
        "code_license": CODE_LICENSE,
        "code_version": facts.code_version,
        "campaigns": facts.campaigns,
        "seed": str(facts.release.seed),
        "split_names": facts.split_names,
        "split_method": facts.split_method,
        "question_keys": facts.question_keys,
        "sources": facts.sources,
        "includes_vatex": facts.includes_vatex,
        "includes_vatex_eval": facts.includes_vatex_eval,
        "excluded_workers": len(facts.excluded_workers),
        "review_decisions": facts.review_decisions,
        "statistics_rows": _statistics_rows(stats),
        "agreement_rows": [
            (key, _fixed(entry["alpha"], 4), str(entry["items"]), str(entry["ratings"]))
            for key, entry in stats["agreement"].items()
        ],
        **_split_tables(facts),
        "excluded_rows": [
            (exclusion_label(reason), str(count)) for reason, count in stats["excluded"].items()
        ],
        "candidates_in_campaigns": str(stats["candidates_in_campaigns"]),
        "imported_rater_slots": str(stats["imported_rater_slots"]),
    }
