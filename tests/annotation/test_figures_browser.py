"""Every campaign figure, read off the pages in Chromium, equals the API's and an independent SQL
count (issue 15, point 1).

A simulated crowd works through the worker API (join → next → submit, the after-submission task
in-process as in tests/annotation/quality/test_spammers_simulated_crowd.py), a curator excludes
one worker, QC runs, and one more worker leases an assignment without submitting. Beside it: the
documented VATEX-EVAL example imported (a closed, imported campaign no QC has seen) and an empty
campaign whose QC run found nothing to compare. Then, at 1280×800 and 390×844, the campaign list
and each campaign page are read figure by figure and compared with the campaigns API, the
quality summary API, the campaigns CSV and raw SQL written here (not the selector).
"""

from __future__ import annotations

import csv
import io
import json
import random
from collections.abc import Iterator
from datetime import timedelta
from io import StringIO
from pathlib import Path
from typing import Any

import pytest
from django.core.management import call_command
from django.db import connection
from rest_framework.test import APIClient

from annotation.models import Assignment, Participation
from annotation.quality.controls import controls_generate
from annotation.quality.exclusions import worker_exclude
from annotation.tasks import after_submission
from tests.annotation.crowd_factories import crowd_campaign
from tests.datasets_app.helpers import EXAMPLES, run_command
from tests.support.browser import chromium_browser
from tests.support.curator import curator_log_in

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

SHOTS = Path("/work/shots/figures")
VIEWPORTS = {"wide": {"width": 1280, "height": 800}, "phone": {"width": 390, "height": 844}}
KEYS = ("descriptiveness", "relevance", "fluency")
CROWD, IMPORTED, EMPTY = "figures-crowd", "vatex-eval", "figures-empty"
NEXT = "/api/v1/worker/assignments/next"

# The figures the campaign list shows, and the campaign page's (a superset).
LIST_FIGURES = (
    "candidates",
    "control_items",
    "candidates_dropped",
    "candidates_complete",
    "candidates_in_play",
    "percent_complete",
    "slots_filled",
    "slots_total",
    "slots_in_progress",
    "judgments",
    "judgments_excluded",
)
PAGE_FIGURES = (*LIST_FIGURES, "percent_filled", "judgments_kept", "judgments_needed")
# Shown only when not zero (the page says nothing of no control items or nothing dropped).
OPTIONAL = {"control_items", "candidates_dropped", "slots_in_progress"}


# ----------------------------------------------------------------------------------------------
# The independent count
# ----------------------------------------------------------------------------------------------


def _one(sql: str, slug: str) -> int:
    with connection.cursor() as cursor:
        cursor.execute(sql, [slug])
        return int(cursor.fetchone()[0] or 0)


CANDIDATES = """
    FROM annotation_campaigncandidate cc JOIN annotation_campaign c ON c.id = cc.campaign_id
    WHERE c.slug = %s"""
KEPT = """(SELECT count(*) FROM annotation_judgment j
           WHERE j.campaign_candidate_id = cc.id AND j.is_excluded = false)"""


def sql_figures(slug: str) -> dict[str, Any]:
    """The figures as docs/figures.md defines them, one plain query each."""
    in_play = "AND cc.is_control = false AND cc.dropped = false"
    figures = {
        "candidates": _one(f"SELECT count(*) {CANDIDATES} AND cc.is_control = false", slug),
        "control_items": _one(f"SELECT count(*) {CANDIDATES} AND cc.is_control = true", slug),
        "candidates_dropped": _one(
            f"SELECT count(*) {CANDIDATES} AND cc.is_control = false AND cc.dropped = true", slug
        ),
        "candidates_complete": _one(
            f"""SELECT count(*) {CANDIDATES} {in_play} AND ({KEPT} >= cc.quota OR EXISTS (
                  SELECT 1 FROM annotation_reviewitem r
                  WHERE r.campaign_candidate_id = cc.id AND r.status = 'resolved'))""",
            slug,
        ),
        "slots_total": _one(f"SELECT sum(cc.quota) {CANDIDATES} {in_play}", slug),
        "slots_filled": _one(
            f"SELECT sum(CASE WHEN {KEPT} > cc.quota THEN cc.quota ELSE {KEPT} END) "
            f"{CANDIDATES} {in_play}",
            slug,
        ),
        "slots_in_progress": _one(
            f"""SELECT count(*) FROM annotation_assignmentitem ai
                JOIN annotation_assignment a ON a.id = ai.assignment_id AND a.status = 'live'
                JOIN annotation_campaigncandidate cc ON cc.id = ai.campaign_candidate_id
                JOIN annotation_campaign c ON c.id = cc.campaign_id
                WHERE c.slug = %s {in_play}""",
            slug,
        ),
        "judgments": _one(
            """SELECT count(*) FROM annotation_judgment j
                JOIN annotation_campaigncandidate cc ON cc.id = j.campaign_candidate_id
                JOIN annotation_campaign c ON c.id = cc.campaign_id
                WHERE c.slug = %s AND cc.is_control = false""",
            slug,
        ),
        "judgments_excluded": _one(
            """SELECT count(*) FROM annotation_judgment j
                JOIN annotation_campaigncandidate cc ON cc.id = j.campaign_candidate_id
                JOIN annotation_campaign c ON c.id = cc.campaign_id
                WHERE c.slug = %s AND cc.is_control = false AND j.is_excluded = true""",
            slug,
        ),
    }
    figures["candidates_in_play"] = figures["candidates"] - figures["candidates_dropped"]
    figures["judgments_kept"] = figures["judgments"] - figures["judgments_excluded"]
    figures["judgments_needed"] = figures["slots_total"] - figures["slots_filled"]
    figures["judgments_needed_at_most"] = figures["judgments_needed"] + _slots_may_open(slug)
    in_play_count = figures["candidates_in_play"]
    figures["percent_complete"] = (
        round(100 * figures["candidates_complete"] / in_play_count, 1) if in_play_count else 0.0
    )
    figures["percent_filled"] = (
        round(100 * figures["slots_filled"] / figures["slots_total"], 1)
        if figures["slots_total"]
        else 0.0
    )
    return figures


def _slots_may_open(slug: str) -> int:
    """docs/figures.md: under adaptive allocation, Σ (maximum − quota) over the candidates in play
    still wanting judgments (`stop_reason` empty); nothing under the fixed policy."""
    with connection.cursor() as cursor:
        cursor.execute(
            f"""SELECT c.allocation::text, cc.quota, cc.stop_reason {CANDIDATES}
                AND cc.is_control = false AND cc.dropped = false""",
            [slug],
        )
        rows = cursor.fetchall()
    total = 0
    for allocation, quota, stop_reason in rows:
        policy = json.loads(allocation) if allocation else {}
        if policy.get("kind") == "adaptive" and not stop_reason:
            total += max(0, policy["maximum"] - quota)
    return total


def sql_latest_alpha(slug: str) -> dict[str, tuple[float | None, float | None, int]]:
    with connection.cursor() as cursor:
        cursor.execute(
            """SELECT s.question_key, s.alpha_all, s.alpha_kept, s.items
               FROM annotation_agreementsnapshot s JOIN annotation_campaign c
                 ON c.id = s.campaign_id
               WHERE c.slug = %s AND s.computed_at = (
                 SELECT max(computed_at) FROM annotation_agreementsnapshot WHERE campaign_id = c.id)""",
            [slug],
        )
        return {key: (alpha_all, alpha_kept, items) for key, alpha_all, alpha_kept, items in cursor}


# ----------------------------------------------------------------------------------------------
# The crowd
# ----------------------------------------------------------------------------------------------


class SimulatedWorker:
    def __init__(self, name: str, generator: random.Random, *, uniform: bool = False) -> None:
        self.name, self.random, self.uniform = name, generator, uniform
        self.client = APIClient()

    def join(self, slug: str) -> None:
        response = self.client.post(
            f"/api/v1/campaigns/{slug}/join",
            {"platform": "prolific", "external_id": self.name, "study_id": "study-1",
             "session_id": f"session-{self.name}"},
            format="json",
        )  # fmt: skip
        assert response.status_code in (200, 201), response.content
        self.client.credentials(HTTP_AUTHORIZATION=f"Worker {response.json()['worker_token']}")

    def lease(self) -> dict[str, Any] | None:
        response = self.client.post(NEXT, {}, format="json")
        if response.status_code != 200:
            return None
        return response.json()

    def work(self, assignments: int) -> int:
        done = 0
        for _ in range(assignments):
            payload = self.lease()
            if payload is None:
                break
            spent = self.random.uniform(20, 40)
            Assignment.objects.filter(pk=payload["assignment_id"]).update(
                issued_at=Assignment.objects.get(pk=payload["assignment_id"]).issued_at
                - timedelta(seconds=spent)
            )
            ratings = [
                {
                    "candidate_id": candidate["id"],
                    **{key: 3 if self.uniform else self.random.randint(1, 5) for key in KEYS},
                }
                for candidate in payload["candidates"]
            ]
            submitted = self.client.post(
                f"/api/v1/worker/assignments/{payload['assignment_id']}/submit",
                {"ratings": ratings,
                 "client_timing": {"active_ms": int(spent * 1000), "video_played_ms": 1500}},
                format="json",
            )  # fmt: skip
            assert submitted.status_code == 201, submitted.content
            after_submission(payload["assignment_id"])
            done += 1
        return done


@pytest.fixture
def figures_world(curator) -> dict[str, Any]:
    generator = random.Random(15)
    campaign = crowd_campaign(clips=8, candidates_per_clip=3, judgments_per_candidate=3, slug=CROWD)
    controls_generate(campaign=campaign, rate=0.5, seed=4)
    workers = [SimulatedWorker(f"crowd-{index}", generator) for index in range(4)]
    workers.append(SimulatedWorker("crowd-uniform", generator, uniform=True))
    for worker in workers:
        worker.join(CROWD)
    assert all([worker.work(3) >= 1 for worker in workers])
    # The uniform worker is excluded (by the rules after a submission already, or by a curator
    # here): their judgments are excluded and their slots reopen.
    worker_exclude(
        participation=Participation.objects.get(
            campaign=campaign, worker__external_id="crowd-uniform"
        ),
        actor=curator,
        reason="always 3",
    )
    out = StringIO()
    call_command("run_qc", CROWD, "--json", stdout=out)
    assert json.loads(out.getvalue())["workers"] == 5
    # One more worker leases an assignment and has not submitted yet.
    late = SimulatedWorker("crowd-late", generator)
    late.join(CROWD)
    assert late.lease() is not None

    imported = run_command("import_vatex_eval", str(EXAMPLES / "vatex_eval.json"))
    assert imported["ok"] is True

    crowd_campaign(clips=1, slug=EMPTY)
    call_command("run_qc", EMPTY, "--json", stdout=StringIO())
    return {"slugs": (CROWD, IMPORTED, EMPTY)}


@pytest.fixture
def figures_browser() -> Iterator[Any]:
    with chromium_browser() as browser:
        yield browser


# ----------------------------------------------------------------------------------------------
# Reading the pages
# ----------------------------------------------------------------------------------------------


def _number(text: str) -> int | float:
    text = text.strip()
    return float(text) if "." in text else int(text)


def read_figures(scope: Any, names: tuple[str, ...]) -> dict[str, int | float]:
    values: dict[str, int | float] = {}
    for name in names:
        cell = scope.locator(f'[data-figure="{name}"]')
        if cell.count() == 0 and name in OPTIONAL:
            values[name] = 0
            continue
        assert cell.count() == 1, f"{name}: {cell.count()} elements"
        values[name] = _number(cell.inner_text())
    return values


def _no_horizontal_overflow(page: Any) -> bool:
    return page.evaluate("document.documentElement.scrollWidth <= window.innerWidth")


def test_every_figure_on_the_pages_equals_the_api_and_an_independent_count(
    live_server, figures_browser, figures_world
):
    SHOTS.mkdir(parents=True, exist_ok=True)
    expected = {slug: sql_figures(slug) for slug in figures_world["slugs"]}
    crowd = expected[CROWD]
    # The world exercises what it should: controls, exclusions, leases, work still needed.
    assert crowd["control_items"] == 4 and crowd["judgments_excluded"] > 0
    assert crowd["slots_in_progress"] > 0 and 0 < crowd["slots_filled"] < crowd["slots_total"]
    assert expected[IMPORTED]["slots_filled"] == expected[IMPORTED]["slots_total"] == 12
    assert expected[IMPORTED]["candidates_complete"] == 4

    for label, viewport in VIEWPORTS.items():
        context = figures_browser.new_context(viewport=viewport)
        page = context.new_page()
        curator_log_in(page, f"{live_server.url}/dashboard/")
        page.screenshot(path=str(SHOTS / f"campaign-list-{label}.png"), full_page=True)
        assert _no_horizontal_overflow(page), label

        api_list = {
            row["slug"]: row
            for row in page.request.get(f"{live_server.url}/api/v1/campaigns/").json()
        }
        csv_rows = {
            row["slug"]: row
            for row in csv.DictReader(
                io.StringIO(page.request.get(f"{live_server.url}/dashboard/campaigns.csv").text())
            )
        }
        for slug, sql in expected.items():
            row = page.locator(f'tr[data-campaign="{slug}"]')
            on_list = read_figures(row, LIST_FIGURES)
            assert on_list == {name: sql[name] for name in LIST_FIGURES}, (label, slug)
            assert api_list[slug]["figures"] == sql, slug
            assert {name: _number(csv_rows[slug][name]) for name in sql} == sql, slug

        for slug, sql in expected.items():
            page.goto(f"{live_server.url}/dashboard/campaigns/{slug}/")
            page.screenshot(path=str(SHOTS / f"campaign-{slug}-{label}.png"), full_page=True)
            assert _no_horizontal_overflow(page), (label, slug)
            progress = page.locator("section[aria-labelledby=progress-h]")
            assert read_figures(progress, PAGE_FIGURES) == {
                name: sql[name] for name in PAGE_FIGURES
            }
            summary = page.request.get(f"{live_server.url}/api/v1/campaigns/{slug}/quality").json()
            assert summary["progress"]["figures"] == sql
            estimate = page.locator("#estimate").inner_text()
            alphas = sql_latest_alpha(slug)
            for key, figure in summary["agreement"].items():
                caption = page.locator(f'figure[data-question="{key}"] figcaption')
                stored = alphas.get(key)
                if stored is None or stored[0] is None:
                    assert caption.locator('[data-figure="alpha_all"]').count() == 0
                else:
                    shown = caption.locator('[data-figure="alpha_all"]').inner_text()
                    assert shown == f"{stored[0]:.3f}" == f"{figure['alpha_all']:.3f}"
                if stored is not None and stored[1] is not None:
                    shown = caption.locator('[data-figure="alpha_kept"]').inner_text()
                    assert shown == f"{stored[1]:.3f}" == f"{figure['alpha_kept']:.3f}"
                    assert (
                        _number(caption.locator('[data-figure="items"]').inner_text()) == stored[2]
                    )
                # A missing alpha always comes with its reason, on the caption and in the chart.
                if figure["alpha_kept"] is None:
                    reason = caption.locator('[data-figure="reason"]').inner_text()
                    assert reason == figure["reason"] != ""
                    chart = page.locator(f'figure[data-question="{key}"] svg')
                    if figure["alpha_all"] is None:
                        assert f"No alpha yet: {reason}." in chart.inner_html()
            if slug == CROWD:
                assert summary["progress"]["estimated_completion"] is not None
                assert summary["progress"]["estimated_completion"] in estimate
                assert all(
                    figure["alpha_kept"] is not None for figure in summary["agreement"].values()
                )
            elif slug == IMPORTED:
                assert summary["progress"]["estimated_completion"] is None
                assert (
                    estimate
                    == "Estimated completion: none — imported campaign: no crowd work to wait for."
                )
                assert summary["agreement"]["overall"]["reason"] == "QC has not run yet"
            else:
                assert (
                    summary["agreement"]["relevance"]["reason"]
                    == "no candidate has 2 kept judgments yet"
                )
        context.close()
