"""The audit log in words: one sentence per `AuditEntry`, as the audit page, the review page's
decisions table and the audit API (`sentence`) show it.

An entry stores its before and after states as JSON for undo; people read "claimed by curator;
status open → claimed", not `{'status': 'open'} → {'status': 'claimed', 'claimed_by': 1}`. Names
(workers, question labels, rule labels) are looked up once for all the entries given.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

from annotation.models import AuditEntry, Campaign, Judgment, Participation, ReviewAction
from annotation.quality.exclusions import EXCLUDED_BY_CURATOR
from annotation.quality.rules import RULE_LABELS

QUALITY_CONTROL = "quality control"


def _number(value: Any) -> str:
    if isinstance(value, float):
        return f"{value:g}" if value == int(value) else f"{value:.2f}"
    return str(value)


def _quoted(text: str) -> str:
    text = " ".join(text.split())
    return f"“{text[:200]}{'…' if len(text) > 200 else ''}”"


class _Names:
    """Worker ids and question labels for a batch of entries, in three queries at most."""

    def __init__(self, entries: Sequence[AuditEntry]) -> None:
        participation_ids: set[int] = set()
        judgment_ids: set[int] = set()
        for entry in entries:
            kind, _, raw = entry.target.partition(":")
            if raw.isdigit() and kind == "worker":
                participation_ids.add(int(raw))
            elif raw.isdigit() and kind == "judgment":
                judgment_ids.add(int(raw))
        self.workers = dict(
            Participation.objects.filter(pk__in=participation_ids).values_list(
                "pk", "worker__external_id"
            )
        )
        self.judgment_workers = dict(
            Judgment.objects.filter(pk__in=judgment_ids).values_list(
                "pk", "participation__worker__external_id"
            )
        )
        self.labels: dict[int, dict[str, str]] = {}
        for campaign_id, questions in Campaign.objects.filter(
            pk__in={entry.campaign_id for entry in entries}
        ).values_list("pk", "questions"):
            self.labels[campaign_id] = {
                question["key"]: question.get("label", question["key"]) for question in questions
            }

    def target(self, entry: AuditEntry) -> str:
        kind, _, raw = entry.target.partition(":")
        if not raw.isdigit():
            return entry.target or "the campaign"
        if kind == "worker":
            return f"worker {self.workers.get(int(raw), raw)}"
        if kind == "judgment":
            worker = self.judgment_workers.get(int(raw))
            return f"judgment {raw}" + (f" (worker {worker})" if worker else "")
        return f"{kind} {raw}"

    def ratings(self, entry: AuditEntry, values: dict[str, Any]) -> str:
        labels = self.labels.get(entry.campaign_id, {})
        return ", ".join(
            f"{labels.get(key, key)} {_number(value)}" for key, value in sorted(values.items())
        )


def _rules(names: Iterable[str]) -> str:
    """The rule labels; a curator's own exclusion is said by the actor already."""
    return ", ".join(RULE_LABELS.get(name, name) for name in names if name != EXCLUDED_BY_CURATOR)


def _undo_result(entry: AuditEntry, undone: AuditEntry | None, names: _Names) -> str:
    after = entry.after or {}
    action = undone.action if undone is not None else ""
    if action == ReviewAction.SET_RATINGS:
        values = (after.get("resolution") or {}).get("values") or {}
        if values:
            return "final ratings back to " + names.ratings(entry, values)
        return "no final rating any more: the score is the mean of the kept judgments again"
    if action == ReviewAction.DROP:
        return "back in releases" if not after.get("dropped") else "still dropped"
    if action == ReviewAction.EXCLUDE_JUDGMENT:
        if after.get("is_excluded"):
            return "the judgment stays excluded: its slot was refilled meanwhile"
        return "the judgment is kept again"
    if action == ReviewAction.EXCLUDE_WORKER:
        return (
            f"status excluded → active, {after.get('judgments_included', 0)} judgment(s) back, "
            f"{after.get('judgments_kept_out', 0)} kept out"
        )
    if action == ReviewAction.INCLUDE_WORKER:
        return (
            f"status active → excluded, {after.get('judgments_excluded', 0)} judgment(s) excluded"
        )
    return "restored what was there before"


def audit_sentence(entry: AuditEntry, names: _Names) -> str:
    actor = entry.actor.get_username() if entry.actor is not None else QUALITY_CONTROL
    before, after = entry.before or {}, entry.after or {}
    target = names.target(entry)
    item = f"review item {entry.review_item_id}" if entry.review_item_id else target
    action = entry.action
    if action == ReviewAction.CLAIM:
        text = f"{item.capitalize()} claimed by {actor}; status open → claimed"
    elif action == ReviewAction.RELEASE:
        text = f"{item.capitalize()} given back to the queue by {actor}; status claimed → open"
    elif action == ReviewAction.SET_RATINGS:
        values = (after.get("resolution") or {}).get("values") or {}
        means = before.get("means") or {}
        text = f"Final ratings of {target} set by {actor}: {names.ratings(entry, values)}"
        if means:
            text += f" (mean of kept judgments was {names.ratings(entry, means)})"
        text += "; status → resolved"
    elif action == ReviewAction.EXCLUDE_JUDGMENT:
        text = f"{target.capitalize()} excluded by {actor}; kept → excluded"
    elif action == ReviewAction.DROP:
        text = f"{target.capitalize()} dropped from releases by {actor}; status → resolved"
    elif action == ReviewAction.EXCLUDE_WORKER:
        rules = _rules(after.get("rules") or [])
        text = f"{target.capitalize()} excluded by {actor}"
        if rules:
            text += f" (rules: {rules})"
        text += (
            f"; status {before.get('status', 'active')} → excluded, "
            f"{after.get('judgments_excluded', 0)} judgment(s) excluded"
        )
    elif action == ReviewAction.INCLUDE_WORKER:
        text = (
            f"{target.capitalize()} re-included by {actor}; status "
            f"{before.get('status', 'excluded')} → active, "
            f"{after.get('judgments_included', 0)} judgment(s) back, "
            f"{after.get('judgments_kept_out', 0)} kept out"
        )
    elif action == ReviewAction.UNDO:
        undone = entry.undoes
        what = undone.get_action_display().lower() if undone is not None else "a decision"
        text = (
            f"{actor.capitalize()} undid “{what}” on {target}: {_undo_result(entry, undone, names)}"
        )
    else:
        text = f"{entry.get_action_display()} on {target} by {actor}"
    if entry.note:
        label = "reason" if action == ReviewAction.EXCLUDE_JUDGMENT else "note"
        text += f"; {label} {_quoted(entry.note)}"
    return text + "."


def audit_sentence_one(entry: AuditEntry) -> str:
    """The sentence of a single entry (e.g. the undo entry an API call just made)."""
    return audit_sentence(entry, _Names([entry]))


def audit_sentences(entries: Iterable[AuditEntry]) -> list[AuditEntry]:
    """The entries, each carrying its sentence as `.sentence` (for pages and the API)."""
    rows = list(entries)
    names = _Names(rows)
    for entry in rows:
        entry.sentence = audit_sentence(entry, names)  # type: ignore[attr-defined]
    return rows
