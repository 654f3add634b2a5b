"""What a worker excluded by quality control is told: the campaign's screen-out code and link
(Prolific's "screened out" completion) or, on MTurk, to return the HIT. The worker API answers it
(403) from the first request after the exclusion on, and so does a join after an erasure."""

from __future__ import annotations

from typing import TypedDict

from annotation.models import Campaign, Participation, Platform


class ScreenOut(TypedDict):
    """The body of the worker API's 403 to an excluded worker."""

    detail: str
    state: str  # always "screened_out"
    platform: str
    screen_out_code: str | None
    redirect_url: str | None
    instruction: str


SCREEN_OUT_DETAIL = (
    "Based on your answers so far, this study has no further clips for you. Thank you for your "
    "time."
)
# What to do now, per platform. On Prolific it names only what the page shows: the campaign's
# screen-out code, its link, both or neither.
_RECORDED = "so that your submission is recorded as screened out."
SCREEN_OUT_PROLIFIC_WITH_CODE_AND_LINK = (
    f"Please return to Prolific with this screen-out code or the link below, {_RECORDED}"
)
SCREEN_OUT_PROLIFIC_WITH_CODE = (
    f"Please return to Prolific and enter this screen-out code, {_RECORDED}"
)
SCREEN_OUT_PROLIFIC_WITH_LINK = f"Please return to Prolific with the link below, {_RECORDED}"
SCREEN_OUT_PROLIFIC = "Please return to Prolific and return your submission there."
SCREEN_OUT_MTURK = "Please return this HIT on MTurk (the Return button): do not submit it."
SCREEN_OUT_INVITE = "You can close this page now."


def screen_out_payload(*, participation: Participation) -> ScreenOut:
    """What the worker API answers (403) to a worker excluded by quality control, from the first
    request after the exclusion on (`next`, `submit`, `me`, `join`): the campaign's screen-out
    code and redirect (Prolific's "screened out" completion) or, on MTurk, the instruction to
    return the HIT. `state` is always "screened_out"."""
    return campaign_screen_out_payload(
        campaign=participation.campaign, platform=participation.worker.platform
    )


def campaign_screen_out_payload(*, campaign: Campaign, platform: str) -> ScreenOut:
    """The screen-out of `campaign` for a worker of `platform` (see `screen_out_payload`); also
    what an excluded person gets after their participation was erased."""
    code = campaign.screen_out_code or None
    redirect = campaign.screen_out_redirect_url or None
    if platform == Platform.MTURK:
        code = redirect = None  # an MTurk worker returns the HIT; no code is ever submitted
        instruction = SCREEN_OUT_MTURK
    elif platform == Platform.PROLIFIC:
        instruction = {
            (True, True): SCREEN_OUT_PROLIFIC_WITH_CODE_AND_LINK,
            (True, False): SCREEN_OUT_PROLIFIC_WITH_CODE,
            (False, True): SCREEN_OUT_PROLIFIC_WITH_LINK,
            (False, False): SCREEN_OUT_PROLIFIC,
        }[(code is not None, redirect is not None)]
    else:
        instruction = SCREEN_OUT_INVITE
    return {
        "detail": SCREEN_OUT_DETAIL,
        "state": "screened_out",
        "platform": str(platform),
        "screen_out_code": code,
        "redirect_url": redirect,
        "instruction": instruction,
    }
