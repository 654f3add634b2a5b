"""Every setting a curator gives a campaign, with its rule, in one table.

A setting used to be checked three times with three sets of bounds (the service, the API's
serializer, the dashboard's form: `min_seconds_on_clip` was 0–3600, 0–2³¹−1 and ≥ 0). Now each
`CampaignOption` holds the bounds, choices, default and messages once: the service validates with
`options_check`, and `annotation.crowd.campaign_option_fields` derives the serializer's and the forms'
fields from the same row, so a bound changed here changes on every surface.

The table's order is the order the admin's form and the API show the fields in (`CAMPAIGN_FIELDS`).
The service's messages are the ones below; the API and the page keep DRF's and Django's own
wording for the bounds they check first (the service's rule is then never reached through them).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from decimal import Decimal, InvalidOperation
from enum import StrEnum
from typing import Any

from django.conf import settings

from annotation.allocation import FixedPolicy, policy_from_dict
from annotation.models import CampaignStatus, ErasureMode
from annotation.questions import Rubric

SLUG_PATTERN = re.compile(r"^[a-z0-9](?:[a-z0-9-]{0,98}[a-z0-9])?$")
SLUG_HELP = "Lower-case letters, digits and hyphens (1–100), e.g. vid-lepus-pilot."
# The rubrics a curator may choose; `imported` belongs to imported campaigns alone.
CHOSEN_RUBRICS = (Rubric.PER_CRITERION, Rubric.PAPER, Rubric.CUSTOM)
# Test-retest bounds (the model's check constraints hold the same numbers): at most every other
# clip a repeat, and a gap a session can reach.
RETEST_SHARE_MAX = 0.5
RETEST_GAP_MAX = 1000
# Column bounds (PositiveSmallIntegerField, PositiveIntegerField) where no business rule is tighter:
# a larger value would pass validation and fail in PostgreSQL with a 500.
SMALL_INTEGER_MAX = 32767
INTEGER_MAX = 2**31 - 1
RETURN_URL_MAX_LENGTH = 500
# The campaign's metric (issue 28): a finished Rigel run or a metric plug-in, by name (annotation
# never imports training_bridge; `common.campaign_metric` checks the rest).
METRIC_PATTERN = r"rigel-run:[1-9][0-9]{0,18}|plugin:[a-z][a-z0-9_]{0,60}"
METRIC_HELP = "rigel-run:<training run id> or plugin:<metric name> (e.g. plugin:bleu4), or empty."


class Kind(StrEnum):
    SLUG = "slug"
    TEXT = "text"  # free text; stripped and measured when it has length bounds
    CODE = "code"  # a short token: stripped, optionally case-folded, matched against a pattern
    INTEGER = "integer"
    NUMBER = "number"
    DECIMAL = "decimal"
    CHOICE = "choice"
    URL = "url"  # a return URL (`return_url_problem`)
    BOOLEAN = "boolean"
    JSON = "json"  # structured settings checked by their own services (controls, QC rules)
    QUESTIONS = "questions"  # checked by `services.campaign_questions.questions_clean`
    ALLOCATION = "allocation"  # a judgment allocation policy (`annotation.allocation`)


Bound = int | float | Decimal


@dataclass(frozen=True)
class CampaignOption:
    """One campaign setting and its rule. `error` is the service's message when a value breaks it
    (`parse_error` when it is no number at all); `help` is the API's description, `page_help` the
    dashboard form's."""

    name: str
    kind: Kind
    error: str = ""
    minimum: Bound | None = None
    maximum: Bound | None = None
    min_length: int | None = None
    max_length: int | None = None
    pattern: str = ""
    case: str = ""  # "upper" or "lower": how a CODE is stored
    decimal_places: int = 0
    choices: tuple[tuple[str, str], ...] = ()
    default: object = None
    # Empty means "none" (no limit, never): the API takes null, the page an empty box.
    nullable: bool = False
    # The empty text is a value (no code, no binding, no redirect).
    blank: bool = False
    # A campaign form's post may leave it out (older forms, scripts): the campaign keeps its own,
    # a new campaign gets the model's default.
    kept_when_absent: bool = False
    # It changes what a judgment means: frozen once crowd judgments exist.
    frozen_once_rated: bool = False
    # `campaign_create` / `campaign_update` take it as an argument of their own (identity, quotas).
    argument: bool = False
    # The dashboard's form offers it (the others: through the API or the admin).
    on_page: bool = True
    label: str | None = None
    help: str = ""
    page_help: str = ""
    parse_error: str = ""

    @property
    def values(self) -> tuple[str, ...]:
        return tuple(value for value, _label in self.choices)

    @property
    def max_digits(self) -> int:
        """A DECIMAL's total digits: those of its maximum's integer part plus its places."""
        assert self.kind == Kind.DECIMAL and self.maximum is not None
        return len(str(int(self.maximum))) + self.decimal_places

    def check(self, value: Any) -> tuple[Any, str | None]:
        """The value as stored and why it may not be (None: it may)."""
        if self.kind == Kind.TEXT:
            return _text_check(self, value)
        if self.kind == Kind.CODE:
            return _code_check(self, value)
        if self.kind in (Kind.INTEGER, Kind.NUMBER):
            return value, _number_problem(self, value)
        if self.kind == Kind.DECIMAL:
            return _decimal_check(self, value)
        if self.kind == Kind.CHOICE:
            return value, None if value in self.values else self.error
        if self.kind == Kind.URL:
            return value, return_url_problem(value)
        if self.kind == Kind.BOOLEAN:
            return bool(value), None
        if self.kind == Kind.ALLOCATION:
            return _allocation_check(self, value)
        return value, None


def _text_check(option: CampaignOption, value: Any) -> tuple[Any, str | None]:
    if option.min_length is None and option.max_length is None:
        return value, None
    text = str(value or "").strip()
    too_short = option.min_length is not None and len(text) < option.min_length
    too_long = option.max_length is not None and len(text) > option.max_length
    return text, option.error if too_short or too_long else None


def _code_check(option: CampaignOption, value: Any) -> tuple[Any, str | None]:
    # Study binding (see the model): Prolific study ids are 24 hexadecimal characters; HIT ids are
    # upper-case letters and digits. Stored normalised, compared with the normalised STUDY_ID/hitId.
    text = str(value or "").strip()
    text = (
        text.upper() if option.case == "upper" else text.lower() if option.case == "lower" else text
    )
    if option.blank and not text:
        return text, None
    if option.max_length is not None and len(text) > option.max_length:
        return text, option.error
    if option.pattern and not re.fullmatch(option.pattern, text):
        return text, option.error
    return text, None


# The largest number of judgments a candidate may get (as `judgments_per_candidate`'s maximum).
JUDGMENTS_MAX = 100


def _allocation_check(option: CampaignOption, value: Any) -> tuple[Any, str | None]:
    """`{}` (or `{"kind": "fixed"}`): the fixed policy, `judgments_per_candidate` judgments each;
    else an adaptive policy (`AdaptivePolicy.as_dict()`'s keys). Its review threshold is the
    campaign's own: `allocation_clean` (the service) fills it in and checks the rules against it,
    so here it is kept only as given."""
    if not isinstance(value, Mapping):
        return value, f"{option.error} Expected an object."
    if not value or dict(value) == {"kind": "fixed"}:
        return {}, None
    given = {key: item for key, item in value.items() if key == "review_range_threshold"}
    try:
        # The campaign's review threshold is checked by the service; here the widest.
        policy = policy_from_dict({**value, "review_range_threshold": SMALL_INTEGER_MAX})
        if given:
            policy_from_dict({"kind": "fixed", **given})  # a whole number ≥ 1
    except ValueError as invalid:
        return value, f"{option.error} {str(invalid)[:1].upper()}{str(invalid)[1:]}."
    if isinstance(policy, FixedPolicy):
        return (
            value,
            'The fixed policy takes judgments_per_candidate: give {} or {"kind": "fixed"}.',
        )
    if policy.maximum > JUDGMENTS_MAX:
        return value, f"At most {JUDGMENTS_MAX} judgments per candidate."
    rules = {key: item for key, item in policy.as_dict().items() if key != "review_range_threshold"}
    return {**rules, **given}, None


def _within(option: CampaignOption, number: Bound) -> bool:
    above_minimum = option.minimum is None or number >= option.minimum
    return above_minimum and (option.maximum is None or number <= option.maximum)


def _number_problem(option: CampaignOption, value: Any) -> str | None:
    if value is None and option.nullable:
        return None
    try:
        number = int(value) if option.kind == Kind.INTEGER else float(value)
    except (TypeError, ValueError):
        return option.error
    return None if _within(option, number) else option.error


def _decimal_check(option: CampaignOption, value: Any) -> tuple[Any, str | None]:
    try:
        amount = Decimal(str(value))
    except InvalidOperation:
        return value, option.parse_error or option.error
    places = Decimal(1).scaleb(-option.decimal_places)
    return amount.quantize(places), None if _within(option, amount) else option.error


def return_url_problem(value: object) -> str | None:
    """Why a return URL (completion or screen-out redirect) may not be stored (None: it may):
    https only in production (DEBUG off); http too for local demos."""
    if not value:
        return None
    text = str(value)
    if len(text) > RETURN_URL_MAX_LENGTH:
        return f"At most {RETURN_URL_MAX_LENGTH} characters."
    schemes = ("https",) if not settings.DEBUG else ("https", "http")
    if not any(re.match(rf"^{scheme}://[^\s/?#]+\S*$", text) for scheme in schemes):
        return "An https:// URL." if not settings.DEBUG else "An http(s) URL."
    return None


def _one_of(values: tuple[str, ...]) -> str:
    return f"One of {', '.join(values)}."


CAMPAIGN_OPTIONS: tuple[CampaignOption, ...] = (
    CampaignOption(
        "slug",
        Kind.SLUG,
        error=SLUG_HELP,
        max_length=100,
        pattern=SLUG_PATTERN.pattern,
        argument=True,
        help=SLUG_HELP,
        page_help="Appears in the worker link /w/<slug>/.",
    ),
    CampaignOption(
        "name",
        Kind.TEXT,
        error="A name of 1 to 200 characters.",
        min_length=1,
        max_length=200,
        argument=True,
    ),
    CampaignOption("description", Kind.TEXT, blank=True, page_help="Shown to workers."),
    CampaignOption(
        "instructions",
        Kind.TEXT,
        blank=True,
        page_help="Extra instructions shown to workers before they start.",
    ),
    CampaignOption(
        "status",
        Kind.CHOICE,
        error=_one_of(tuple(CampaignStatus.values)),
        choices=tuple(CampaignStatus.choices),
        default=CampaignStatus.ACTIVE,
    ),
    CampaignOption("questions", Kind.QUESTIONS, argument=True, frozen_once_rated=True),
    CampaignOption(
        "rubric",
        Kind.CHOICE,
        error=_one_of(CHOSEN_RUBRICS),
        choices=tuple((value, Rubric(value).label) for value in CHOSEN_RUBRICS),
        default=Rubric.PER_CRITERION,
        kept_when_absent=True,
        frozen_once_rated=True,
        label="Rating guide (rubric)",
        help="Whose words describe each question's levels: per_criterion (the default; "
        "Lepus's own wording for each question), paper (the Rigel paper's Appendix C holistic "
        "rubric, the same for every question) or custom (each question gives its levels). "
        "Frozen once workers have submitted judgments.",
        page_help="What workers read under each question. Per-criterion: level descriptions "
        "written for each question (Lepus's own wording). The paper's: Appendix C's one holistic "
        "rubric, shown for every question (how Vid-Lepus was collected). Custom: the levels in "
        "the JSON below. The release card names the rubric.",
    ),
    # Key of an explicit overall question (checked against the questions by the service).
    CampaignOption(
        "overall_question_key", Kind.TEXT, blank=True, frozen_once_rated=True, on_page=False
    ),
    CampaignOption(
        "judgments_per_candidate",
        Kind.INTEGER,
        error="Between 1 and 100.",
        minimum=1,
        maximum=100,
        default=3,
        argument=True,
    ),
    CampaignOption(
        "allocation",
        Kind.ALLOCATION,
        error="A judgment allocation policy:",
        default={},
        kept_when_absent=True,
        frozen_once_rated=True,
        label="Judgment allocation",
        help="How many judgments each candidate gets. {} (the default): the fixed policy, "
        'judgments_per_candidate each. Adaptive: {"kind": "adaptive", "minimum": 2, '
        '"maximum": 5, "disagreement_range": 2, "standard_error_threshold": null, '
        '"metric_disagreement_threshold": null}: every candidate gets the minimum, then one more '
        "at a time up to the maximum while its kept ratings disagree (range at least "
        "disagreement_range), its calibrated standard error is above its threshold or the "
        "campaign metric's score is further from the crowd's mean than its threshold plus the "
        "metric's uncertainty (null turns a rule off). The review threshold is the campaign's "
        "review_range_threshold. Frozen once workers have submitted judgments.",
        page_help="Fixed: judgments per candidate, each. Adaptive: every candidate gets the "
        "minimum; one more at a time, up to the maximum, while its ratings disagree (range at "
        "least the disagreement range), its calibrated standard error is above the threshold, "
        "or the campaign metric disagrees with the crowd by more than the threshold (empty: "
        "rule off). Frozen once workers have submitted judgments.",
    ),
    CampaignOption(
        "reference_free",
        Kind.BOOLEAN,
        argument=True,
        frozen_once_rated=True,
        page_help="Reference-free condition: workers see no references.",
    ),
    CampaignOption(
        "lease_seconds",
        Kind.INTEGER,
        error="Between 30 seconds and 7 days.",
        minimum=30,
        maximum=7 * 24 * 3600,
        default=900,
        page_help="How long a worker may hold a clip.",
    ),
    CampaignOption(
        "min_seconds_on_clip",
        Kind.INTEGER,
        error="Between 0 and 3600.",
        minimum=0,
        maximum=3600,
        default=0,
        page_help="Ratings unlock no sooner than this after the clip shows.",
    ),
    # Rating levels are 0–100 (`questions_clean`): a threshold above every level means "always".
    CampaignOption(
        "reason_required_at_or_below",
        Kind.INTEGER,
        error="A rating value (or empty for never).",
        minimum=0,
        maximum=100,
        nullable=True,
        page_help="Ask for a free-text reason when a rating is at or below this (empty: never).",
    ),
    CampaignOption(
        "max_assignments_per_worker",
        Kind.INTEGER,
        error=f"Between 1 and {INTEGER_MAX} (or empty for no limit).",
        minimum=1,
        maximum=INTEGER_MAX,
        nullable=True,
        page_help="Empty: no limit.",
    ),
    CampaignOption(
        "retest_share",
        Kind.NUMBER,
        error=f"Between 0 (off) and {RETEST_SHARE_MAX}.",
        minimum=0,
        maximum=RETEST_SHARE_MAX,
        default=0,
        kept_when_absent=True,
        help="Test-retest: share of each worker's submitted clips served to them again "
        "later in their session, unannounced (0 = off). Repeats take no quota slot, are not "
        "paid and never count as judgments.",
        page_help="Test-retest: share of each worker's clips shown to them again later, "
        "unannounced, to measure their consistency (0: off). Repeats are not paid and never "
        "count as judgments.",
    ),
    CampaignOption(
        "retest_min_gap",
        Kind.INTEGER,
        error=f"Between 1 and {RETEST_GAP_MAX} clips.",
        minimum=1,
        maximum=RETEST_GAP_MAX,
        default=3,
        kept_when_absent=True,
        help="Test-retest: at least this many other clips between a clip and its repeat.",
        page_help="At least this many other clips between a clip and its repeat.",
    ),
    CampaignOption(
        "control_rate",
        Kind.NUMBER,
        error="Between 0 and 1.",
        minimum=0,
        maximum=1,
        default=0,
        on_page=False,
    ),
    CampaignOption("control_settings", Kind.JSON, on_page=False),
    CampaignOption("qc_rules", Kind.JSON, on_page=False),
    CampaignOption(
        "review_range_threshold",
        Kind.INTEGER,
        error=f"Between 1 and {SMALL_INTEGER_MAX}.",
        minimum=1,
        maximum=SMALL_INTEGER_MAX,
        default=3,
        on_page=False,
    ),
    CampaignOption(
        "metric",
        Kind.CODE,
        error=METRIC_HELP,
        max_length=100,
        pattern=METRIC_PATTERN,
        blank=True,
        label="Metric in the loop",
        help=METRIC_HELP + " Checked by training_bridge: the run must have finished and its "
        "release must share no train or validation clip with the campaign. Setting it scores "
        "every candidate without a metric score (a job on the training queue).",
        page_help=METRIC_HELP + " A finished run trained on none of this campaign's clips; its "
        "scores are compared with the crowd's on the campaign page. Empty: none.",
    ),
    CampaignOption(
        "pay_per_assignment",
        Kind.DECIMAL,
        error="Between 0 and 999999.99.",
        parse_error="A decimal amount.",
        minimum=Decimal("0"),
        maximum=Decimal("999999.99"),
        decimal_places=2,
        default=0,
        page_help="Per submitted clip.",
    ),
    CampaignOption(
        "currency",
        Kind.CODE,
        error="A three-letter ISO 4217 code, e.g. GBP or USD.",
        min_length=3,
        max_length=3,
        pattern=r"[A-Z]{3}",
        default="GBP",
    ),
    CampaignOption(
        "completion_code", Kind.CODE, error="At most 100 characters.", max_length=100, blank=True
    ),
    CampaignOption(
        "redirect_url",
        Kind.URL,
        max_length=RETURN_URL_MAX_LENGTH,
        blank=True,
        page_help="e.g. https://app.prolific.com/submissions/complete?cc=CODE",
    ),
    CampaignOption(
        "screen_out_code",
        Kind.CODE,
        error="At most 100 characters.",
        max_length=100,
        blank=True,
        help="Shown to a worker excluded by quality control (e.g. Prolific's 'screened "
        "out' completion code).",
        page_help="Given to a worker excluded by quality control (Prolific: the study's "
        "'screened out' completion code). MTurk workers are told to return the HIT.",
    ),
    CampaignOption(
        "screen_out_redirect_url",
        Kind.URL,
        max_length=RETURN_URL_MAX_LENGTH,
        blank=True,
        help="Where a worker excluded by quality control is sent (https; e.g. Prolific's "
        "completion URL with the screened-out code). MTurk workers are told to return the HIT.",
        page_help="Where an excluded worker is sent, e.g. "
        "https://app.prolific.com/submissions/complete?cc=SCREENED",
    ),
    CampaignOption(
        "prolific_study_id",
        Kind.CODE,
        error="A Prolific study id: 24 hexadecimal characters.",
        max_length=24,
        pattern=r"[0-9a-f]{24}",
        case="lower",
        blank=True,
        on_page=False,
        help="Bind the campaign to this Prolific study: joins carrying another STUDY_ID, or "
        "from MTurk, are refused. Blank: no binding.",
    ),
    CampaignOption(
        "mturk_hit_id",
        Kind.CODE,
        error="An MTurk HIT id: 20 to 64 letters and digits.",
        max_length=64,
        pattern=r"[0-9A-Z]{20,64}",
        case="upper",
        blank=True,
        on_page=False,
        help="Bind the campaign to this MTurk HIT: joins carrying another hitId, or from "
        "Prolific, are refused. Blank: no binding.",
    ),
    CampaignOption(
        "erasure_mode",
        Kind.CHOICE,
        error=_one_of(tuple(ErasureMode.values)),
        choices=tuple(ErasureMode.choices),
        default=ErasureMode.DELETE,
        kept_when_absent=True,
        label="When a participant is erased",
        help="What erasing a participant does to their judgments: delete them, or keep them "
        "under a random pseudonym. Platform ids and free text are deleted either way; the "
        "consent text tells workers which applies.",
        page_help="Their platform id and free text are always deleted; this decides their "
        "ratings. The consent text tells workers which applies.",
    ),
)
OPTIONS_BY_NAME: Mapping[str, CampaignOption] = {option.name: option for option in CAMPAIGN_OPTIONS}

# Every field a curator sets on a campaign, in the order forms and the API show them: the admin's
# form and the API's campaign representation list exactly these (plus read-only figures).
CAMPAIGN_FIELDS = tuple(option.name for option in CAMPAIGN_OPTIONS)
ARGUMENT_FIELDS = tuple(option.name for option in CAMPAIGN_OPTIONS if option.argument)
OPTION_FIELDS = tuple(option.name for option in CAMPAIGN_OPTIONS if not option.argument)
FROZEN_ONCE_RATED = tuple(option.name for option in CAMPAIGN_OPTIONS if option.frozen_once_rated)
KEPT_WHEN_ABSENT = tuple(option.name for option in CAMPAIGN_OPTIONS if option.kept_when_absent)
RETURN_URL_FIELDS = tuple(option.name for option in CAMPAIGN_OPTIONS if option.kind == Kind.URL)


def options_check(
    values: Mapping[str, object],
) -> tuple[dict[str, object], dict[str, list[str]]]:
    """The settings as stored, and the broken rules by setting ({} when none), in table order."""
    clean = dict(values)
    errors: dict[str, list[str]] = {}
    for option in CAMPAIGN_OPTIONS:
        if option.name not in clean:
            continue
        clean[option.name], problem = option.check(clean[option.name])
        if problem:
            errors[option.name] = [problem]
    return clean, errors


def allocation_clean(value: object, *, review_range_threshold: int) -> tuple[Any, str | None]:
    """The allocation setting as stored for a campaign whose review threshold is this, and why it
    may not be (None: it may): the table's rule, then the adaptive policy checked against the
    campaign's own review threshold (its disagreement range must stay below it)."""
    option = OPTIONS_BY_NAME["allocation"]
    clean, problem = option.check(value)
    if problem or not clean:
        return clean, problem
    given = clean.get("review_range_threshold", review_range_threshold)
    if given != review_range_threshold:
        return value, (
            "The review threshold is the campaign's review_range_threshold "
            f"({review_range_threshold}): leave it out."
        )
    try:
        policy = policy_from_dict({**clean, "review_range_threshold": review_range_threshold})
    except ValueError as invalid:
        return value, f"{option.error} {str(invalid)[:1].upper()}{str(invalid)[1:]}."
    return policy.as_dict(), None
