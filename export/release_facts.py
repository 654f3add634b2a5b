"""What a release's card and manifest say about it, gathered once by the build (`ReleaseFacts`):
the selection and split counts, the statistics, the campaigns and sources, and the quality-control
facts with the workers pseudonymised."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, TypedDict

from export.licences import SourceLicence, hub_license_ids, release_licences
from export.models import Release
from export.reads.sql_selection import Selection

REVIEW_DECISION_ACTIONS = (
    "set_ratings",
    "exclude_judgment",
    "drop",
    "undo",
    "exclude_worker",
    "include_worker",
)


class ReleaseCounts(TypedDict):
    """The release's `counts` (database and API)."""

    splits: dict[str, dict[str, int]]  # {split: {"candidates": n, "clips": n}}
    released: int
    excluded: dict[str, int]
    candidates_in_campaigns: int
    per_campaign: dict[str, dict[str, int]]


class ExcludedWorker(TypedDict):
    """A worker the release's campaigns excluded, as the manifest lists them (pseudonymised)."""

    campaign: str
    worker: str
    decided_by: str  # "curator" or "rules"
    rules: list[str]
    judgments_excluded: int
    reasons: list[str]


@dataclass(frozen=True)
class ReleaseFacts:
    release: Release
    split_names: list[str]
    selection: Selection
    question_keys: list[str]
    campaigns: list[dict[str, Any]]
    split_method: dict[str, Any]
    counts: ReleaseCounts
    stats: dict[str, Any]
    sources: list[dict[str, str]]
    excluded_workers: list[ExcludedWorker]
    judgment_exclusions: dict[str, dict[str, int]]
    review_by_campaign: dict[str, dict[str, int]]
    code_version: str
    # Per calibrated campaign: the model and its fit statistics (annotation.quality.calibration_job).
    calibration: list[dict[str, Any]] = field(default_factory=list)
    # Per campaign that served test-retest repeats: share, pairs and consistency
    # (annotation.quality.consistency).
    retest: list[dict[str, Any]] = field(default_factory=list)
    # Released candidates with at least one worker reason in explanations.jsonl (None: no file,
    # the release has no raw judgments; export.explanations).
    explanations: int | None = None
    # Per campaign: its allocation policy with every parameter, its metric, and the released
    # candidates per stop reason and per rule that opened slots (export.reads.sql_allocation).
    allocation: list[dict[str, Any]] = field(default_factory=list)

    @property
    def ratios(self) -> dict[str, float]:
        return dict(zip(self.split_names, self.release.ratios, strict=True))

    @property
    def adaptive(self) -> bool:
        """Whether a campaign of the release allocates judgments adaptively (then the records
        have `opened_by`)."""
        return any(entry["policy"]["kind"] != "fixed" for entry in self.allocation)

    @property
    def review_decisions(self) -> int:
        return sum(
            count
            for actions in self.review_by_campaign.values()
            for action, count in actions.items()
            if action in REVIEW_DECISION_ACTIONS
        )

    @property
    def includes_vatex_eval(self) -> bool:
        return any(source["kind"] == "vatex_eval" for source in self.sources) or any(
            campaign["slug"] == "vatex-eval" for campaign in self.campaigns
        )

    @property
    def includes_vatex(self) -> bool:
        return self.includes_vatex_eval or any(source["kind"] == "vatex" for source in self.sources)

    @property
    def licences(self) -> list[SourceLicence]:
        """The licence and attribution of each kind of source in the release (export.licences)."""
        return release_licences(
            judgments_license=self.release.judgments_license,
            campaigns=self.campaigns,
            source_kinds={source["kind"] for source in self.sources},
            includes_vatex=self.includes_vatex,
            includes_vatex_eval=self.includes_vatex_eval,
        )

    @property
    def license_ids(self) -> list[str]:
        return hub_license_ids(self.licences)


def release_counts(
    *, split_names: list[str], selection: Selection, per_split: dict[int, dict[str, int]]
) -> ReleaseCounts:
    """The release's `counts` (database and API): candidates and clips per split, the selection."""
    return {
        "splits": {
            name: per_split.get(index, {"candidates": 0, "clips": 0})
            for index, name in enumerate(split_names)
        },
        "released": selection["released"],
        "excluded": selection["excluded"],
        "candidates_in_campaigns": selection["candidates_in_campaigns"],
        "per_campaign": selection["per_campaign"],
    }


def excluded_workers(
    *, workers: list[dict[str, Any]], pseudonyms: dict[int, str]
) -> list[ExcludedWorker]:
    """The reads' excluded workers with their pseudonyms instead of database ids, in a fixed order."""
    return sorted(
        (
            {
                "campaign": entry["campaign"],
                "worker": pseudonyms.get(entry["worker_pk"], "unknown"),
                "decided_by": "curator" if entry["by_curator"] else "rules",
                "rules": entry["rules"],
                "judgments_excluded": entry["judgments_excluded"],
                "reasons": entry["reasons"],
            }
            for entry in workers
        ),
        key=lambda entry: (entry["campaign"], entry["worker"]),
    )
