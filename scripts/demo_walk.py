#!/usr/bin/env python
"""Walk every page of a running demo in Chromium, as its curator and as a worker, at a laptop's
and a phone's width (1280 and 390 px), doing the demo's main job from the pages on the way.

    .venv/bin/python scripts/demo_walk.py --base-url http://127.0.0.1:8000 \\
        --username curator --password PASSWORD --campaign demo --screenshots var/demo/walk --json

On the way it: opens the worker page (and starts as a Prolific worker); has three workers rate the
demo campaign through the worker API the rating page drives (the submits wait as long as a person
watching a clip would, so QC keeps them); runs QC from the campaign page and opens a review item;
uploads the demo scenes again on the import page; builds two releases on the releases page (the
imported VATEX-EVAL slice alone, then it with the rated scenes), waits for them, opens and verifies
them (each file of the zip against the sha256 the page and `manifest.json` list); tries to train
on the first (refused: its clips have no video) and trains the tiny model on the second until the
run finishes; opens the run, the comparison of runs and an evaluation. First of all it registers
the demo's own webhook receiver from its page (or `--webhook-url` through the form), and at the end
checks on that page that the releases' and the run's events arrived, signed.

Every page must answer without a 4xx/5xx (itself or any of its subresources), log no console
error, and fit the screen (`devtools.browser.viewport_overflow`). A screenshot of each page at each
width is saved. Exit status 0 when all held, 1 with the list of problems otherwise.

`WALKED_ROUTES` names the URL route of each page opened here and `NOT_WALKED` the pages left out
with the reason; `tests/test_demo_walk_routes.py` fails on a curator's or worker's page that is in
neither, so a new page joins this walk the day it is made.
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import io
import json
import os
import re
import secrets
import sys
import threading
import time
import urllib.error
import urllib.request
import zipfile
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urljoin, urlparse

REPOSITORY = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPOSITORY))

from devtools.browser import CHROMIUM, CHROMIUM_ARGS, VIEWPORTS, viewport_overflow  # noqa: E402

# Route name -> the path this walk opens for it ({campaign}, {id}: filled from the demo). The
# route test resolves each path to its route, so a renamed route or a moved path fails there.
WALKED_ROUTES: dict[str, str] = {
    "login": "/accounts/login/",
    "worker:entry": "/w/{campaign}/",
    "worker:erase": "/w/{campaign}/erase/",
    "annotation:campaign-list": "/dashboard/",
    "annotation:campaign-create": "/dashboard/campaigns/new/",
    "annotation:campaign-detail": "/dashboard/campaigns/{campaign}/",
    "annotation:campaign-edit": "/dashboard/campaigns/{campaign}/edit/",
    "annotation:campaign-links": "/dashboard/campaigns/{campaign}/links/",
    "annotation:quality-workers": "/dashboard/campaigns/{campaign}/workers/",
    "annotation:quality-worker": "/dashboard/campaigns/{campaign}/workers/{id}/",
    "annotation:review-queue": "/dashboard/campaigns/{campaign}/review/",
    "annotation:review-item": "/dashboard/campaigns/{campaign}/review/{id}/",
    "annotation:audit-log": "/dashboard/campaigns/{campaign}/audit/",
    "annotation:leaderboard": "/dashboard/campaigns/{campaign}/leaderboard/",
    "annotation:preview": "/dashboard/campaigns/{campaign}/preview/",
    "annotation:data": "/dashboard/datasets/",
    "annotation:imports": "/dashboard/datasets/imports/",
    "annotation:import-detail": "/dashboard/datasets/imports/{id}/",
    "annotation:browse-clips": "/dashboard/datasets/clips/",
    "annotation:browse-clip": "/dashboard/datasets/clips/{id}/",
    "annotation:browse-candidates": "/dashboard/datasets/candidates/",
    "annotation:browse-candidate": "/dashboard/datasets/candidates/{id}/",
    "annotation:browse-judgments": "/dashboard/datasets/judgments/",
    "annotation:browse-workers": "/dashboard/datasets/workers/",
    "export:list": "/dashboard/releases/",
    "export:detail": "/dashboard/releases/{id}/",
    "export:compare": "/dashboard/releases/{id}/compare/{id}/",
    "training_bridge:run-list": "/dashboard/training/",
    "training_bridge:run-detail": "/dashboard/training/{id}/",
    "training_bridge:run-compare": "/dashboard/training/compare/",
    "training_bridge:evaluation-detail": "/dashboard/training/evaluations/{id}/",
    "training_bridge:metrics-leaderboard": "/dashboard/training/metrics/",
    "webhooks:list": "/dashboard/webhooks/",
    "webhooks:detail": "/dashboard/webhooks/{id}/",
    "webhooks:demo-receiver": "/dashboard/webhooks/demo-receiver/",
}
# Pages a curator or worker can open that this walk leaves out, and why.
NOT_WALKED: dict[str, str] = {
    "password_change": "Django's own form, not linked from the navigation",
    "password_change_done": "Django's own page, not linked from the navigation",
}

DEMO_WORKER_PARAMETERS = (
    "?PROLIFIC_PID=5f0c0ffee0ddba11c0ffee01&STUDY_ID=demo-study&SESSION_ID=demo-session-1"
)
DEMO_RECEIVER = "/dashboard/webhooks/demo-receiver/"
SCENES_FILE = REPOSITORY / "data" / "demo_scenes" / "scenes.jsonl"
# What a careful rater gives each kind of demo caption (descriptiveness, relevance, fluency): the
# scenes' captions are exact or wrong in a known way (datasets_app/demo_scenes.py).
KIND_RATINGS = {
    "exact": (5, 5, 5),
    "too_vague": (2, 4, 4),
    "broken_grammar": (4, 4, 1),
    "wrong_colour": (3, 2, 5),
    "wrong_action": (3, 2, 5),
    "hallucinated_object": (4, 2, 5),
    "unrelated": (1, 1, 5),
}
# Prolific participant ids (24 hexadecimal characters) of three raters.
RATERS = ("5f0c0ffee0ddba11c0ffee11", "5f0c0ffee0ddba11c0ffee12", "5f0c0ffee0ddba11c0ffee13")
# Server-side seconds between being offered a clip and submitting it: QC's too-fast rule excludes
# a worker who spends less than half a clip's length (4 s) on it.
SECONDS_PER_CLIP = 2.5


@dataclass
class Visit:
    route: str
    path: str
    width: str
    status: int
    screenshot: str
    problems: list[str] = field(default_factory=list)


class Walker:
    """Opens pages at both widths in a logged-in context each, collecting what goes wrong."""

    def __init__(self, browser: Any, base_url: str, screenshots: Path) -> None:
        self.browser = browser
        self.base_url = base_url.rstrip("/")
        self.screenshots = screenshots
        self.visits: list[Visit] = []
        self.problems: list[str] = []
        self.pages: dict[str, Any] = {}
        self._seen: list[str] = []
        self._count = 0
        for width in VIEWPORTS:
            self.pages[width] = self.new_page(width)

    def new_page(self, width: str) -> Any:
        viewport_width, viewport_height = VIEWPORTS[width]
        context = self.browser.new_context(
            viewport={"width": viewport_width, "height": viewport_height}, accept_downloads=True
        )
        page = context.new_page()
        page.set_default_timeout(30_000)
        self.listen(page)
        return page

    def listen(self, page: Any) -> None:
        def on_response(response: Any) -> None:
            if response.status >= 400 and not getattr(page, "_lepus_expected", False):
                self._seen.append(
                    f"HTTP {response.status} {response.request.method} {response.url}"
                )

        page.on("response", on_response)

        def on_console(message: Any) -> None:
            # Chromium logs a 400 answer to a form as a console error too.
            if message.type == "error" and not getattr(page, "_lepus_expected", False):
                self._seen.append(f"console error: {message.text}")

        page.on("console", on_console)
        page.on("pageerror", lambda error: self._seen.append(f"page error: {error}"))

    def url(self, path: str) -> str:
        return urljoin(self.base_url + "/", path.lstrip("/"))

    def check(self, route: str, page: Any, width: str, *, status: int | None = None) -> Visit:
        """The checks of the page now shown, a screenshot, and the problems seen since the last."""
        # A page that keeps polling (a job's progress) still gets its checks.
        with contextlib.suppress(Exception):
            page.wait_for_load_state("networkidle", timeout=15_000)
        self._count += 1
        path = urlparse(page.url).path + (
            f"?{urlparse(page.url).query}" if urlparse(page.url).query else ""
        )
        name = re.sub(r"[^a-z0-9]+", "-", route.lower()).strip("-")
        shot = self.screenshots / f"{self._count:03d}-{name}-{width}.png"
        page.screenshot(path=str(shot), full_page=True)
        problems = list(self._seen)
        self._seen.clear()
        overflow = viewport_overflow(page)
        if overflow:
            problems.append(overflow)
        if page.locator("h1").count() == 0:
            problems.append("no <h1>")
        visit = Visit(route, path, width, status or 0, str(shot), problems)
        self.visits.append(visit)
        self.problems.extend(f"{route} {path} at {width}: {problem}" for problem in problems)
        return visit

    def open(self, route: str, path: str, *, widths: tuple[str, ...] = tuple(VIEWPORTS)) -> None:
        """Open `path` at each width and check it."""
        for width in widths:
            page = self.pages[width]
            answer = page.goto(self.url(path))
            status = answer.status if answer is not None else 0
            self.check(route, page, width, status=status)

    def wide(self) -> Any:
        return self.pages["wide"]


# --- the demo's worker API (what the rating page's script does) -------------------------------


def _api(
    base_url: str, method: str, path: str, body: Any = None, token: str = ""
) -> tuple[int, Any]:
    headers = {"Accept": "application/json", "Content-Type": "application/json"}
    if token:
        headers["Authorization"] = f"Worker {token}"
    data = None if body is None else json.dumps(body).encode()
    request = urllib.request.Request(base_url + path, data=data, method=method, headers=headers)
    try:
        with urllib.request.urlopen(request, timeout=60) as response:
            raw = response.read()
            return response.status, json.loads(raw) if raw else None
    except urllib.error.HTTPError as error:
        raw = error.read()
        try:
            return error.code, json.loads(raw)
        except ValueError:
            return error.code, raw.decode(errors="replace")


def _scene_kinds() -> dict[str, str]:
    """Caption text -> its kind (exact, wrong_colour, ...), from the demo's scene file."""
    kinds = {}
    for line in SCENES_FILE.read_text(encoding="utf-8").splitlines():
        if line.strip():
            for candidate in json.loads(line)["candidates"]:
                kinds[candidate["text"]] = candidate["id"].rsplit(":", 1)[-1]
    return kinds


def rate_as(base_url: str, campaign: str, worker: str, *, disagree: bool) -> dict[str, Any]:
    """One worker rates every clip the campaign offers them. `disagree`: this worker rates one
    caption far from the others, so QC sends it to the review queue."""
    kinds = _scene_kinds()
    status, joined = _api(
        base_url,
        "POST",
        f"/api/v1/campaigns/{campaign}/join",
        {"platform": "prolific", "external_id": worker, "study_id": "demo-walk",
         "session_id": f"walk-{worker}"},
    )  # fmt: skip
    if status != 200:
        return {"worker": worker, "error": f"join answered {status}: {joined}"}
    token = joined["worker_token"]
    submitted = 0
    # A candidate rated 3 everywhere cannot be disagreed with by 3 points: the disagreeing worker
    # waits for the first one with a value off the middle (candidates come in a random order).
    disagreed = not disagree
    while True:
        status, offer = _api(base_url, "POST", "/api/v1/worker/assignments/next", token=token)
        if status == 204:
            break
        if status != 200:
            return {"worker": worker, "submitted": submitted, "error": f"next: {status} {offer}"}
        keys = [question["key"] for question in offer["questions"]]
        ratings: list[dict[str, Any]] = []
        for candidate in offer["candidates"]:
            values: tuple[int, ...] = KIND_RATINGS.get(kinds.get(candidate["text"], ""), (3, 3, 3))
            if not disagreed and any(value != 3 for value in values):
                values = tuple(1 if value >= 3 else 5 for value in values)
                disagreed = True
            ratings.append(
                {"candidate_id": candidate["id"], **dict(zip(keys, values, strict=False))}
            )
        time.sleep(SECONDS_PER_CLIP)
        status, answer = _api(
            base_url,
            "POST",
            f"/api/v1/worker/assignments/{offer['assignment_id']}/submit",
            {"ratings": ratings,
             "client_timing": {"active_ms": int(SECONDS_PER_CLIP * 1000), "video_played_ms": 4000}},
            token=token,
        )  # fmt: skip
        if status not in (200, 201):
            return {"worker": worker, "submitted": submitted, "error": f"submit: {status} {answer}"}
        submitted += 1
    return {"worker": worker, "submitted": submitted}


def rate_campaign(base_url: str, campaign: str) -> list[dict[str, Any]]:
    results: list[dict[str, Any]] = []
    threads = [
        threading.Thread(
            target=lambda worker=worker, index=index: results.append(
                rate_as(base_url, campaign, worker, disagree=index == 2)
            )
        )
        for index, worker in enumerate(RATERS)
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return sorted(results, key=lambda result: result["worker"])


# --- steps ---------------------------------------------------------------------------------------


def wait_for(
    what: str, condition: Callable[[], bool], *, timeout: float, every: float = 2.0
) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise TimeoutError(f"{what}: not done after {timeout:.0f} s")
        time.sleep(every)


def status_of(page: Any, url: str) -> str:
    """Reload `url` and read the job status the page shows: a `data-status` (releases), a
    `status-<status>` class (runs, evaluations) or `data-finished` (imports: "finished")."""
    page.goto(url)
    page.wait_for_load_state("domcontentloaded")
    found = page.evaluate(
        """() => {
          const marked = document.querySelector("h2 [data-status], [data-status]");
          if (marked) { return marked.getAttribute("data-status"); }
          const classed = document.querySelector("#run-status, #evaluation-status");
          if (classed) {
            const match = classed.className.match(/status-(\\w+)/);
            return match ? match[1] : "";
          }
          const job = document.querySelector("[data-finished]");
          return job ? (job.getAttribute("data-finished") === "true" ? "finished" : "running") : "";
        }"""
    )
    return str(found or "")


def first_link(page: Any, pattern: str) -> str:
    """The first link on the page whose path matches `pattern` (a regular expression)."""
    for href in page.eval_on_selector_all(
        "a[href]", "links => links.map(a => a.getAttribute('href'))"
    ):
        path = urlparse(href).path
        if re.fullmatch(pattern, path):
            return href
    return ""


@contextmanager
def expecting_refusal(page: Any) -> Iterator[None]:
    """A form answered 400 on purpose (a refusal the walk checks): not a problem."""
    page._lepus_expected = True
    try:
        yield
    finally:
        page._lepus_expected = False


def walk(args: argparse.Namespace, walker: Walker, report: dict[str, Any]) -> None:
    base, campaign = walker.base_url, args.campaign
    wide = walker.wide()

    # The login page, then logged in at each width.
    for width, page in walker.pages.items():
        page.goto(walker.url("/accounts/login/?next=/dashboard/"))
        walker.check("login", page, width)
        page.fill("#id_username", args.username)
        page.fill("#id_password", args.password)
        page.click("button[type=submit]")
        page.wait_for_url(re.compile(r".*/dashboard/$"))

    # The worker page, as the demo prints it, in a browser of its own (no curator session). The
    # walk's worker has an id of its own: a participation belongs to the browser that joined first
    # (docs/crowd-flow.md, "Who a worker is"), so the id the demo prints stays free for whoever
    # opens it. Both widths are tabs of one browser: the second tab joins as the same worker. The
    # id sorts before the raters' below, as the printed one did, so the workers table's first row,
    # which the walk opens, is still this worker's.
    own_id = f"5f0c0ffee0ddba110{secrets.token_hex(3)}0"
    worker_url = f"/w/{campaign}/" + DEMO_WORKER_PARAMETERS.replace(
        "5f0c0ffee0ddba11c0ffee01", own_id
    )
    worker_browser = None
    for width in VIEWPORTS:
        if worker_browser is None:
            page = walker.new_page(width)
            worker_browser = page.context
        else:
            page = worker_browser.new_page()
            page.set_viewport_size(dict(zip(("width", "height"), VIEWPORTS[width], strict=True)))
            page.set_default_timeout(30_000)
            walker.listen(page)
        answer = page.goto(walker.url(worker_url))
        walker.check("worker:entry", page, width, status=answer.status if answer else 0)
        page.click("#start")
        # A clip to rate, or (the campaign done, e.g. on a second walk) the end screen.
        page.wait_for_function(
            """() => {
              const task = document.querySelector("#task");
              const done = document.querySelector("#done");
              return (task && !task.hidden && document.querySelector("#candidates").children.length)
                || (done && !done.hidden);
            }""",
            timeout=60_000,
        )
        walker.check("worker:entry", page, width)
        answer = page.goto(walker.url(f"/w/{campaign}/erase/"))
        walker.check("worker:erase", page, width, status=answer.status if answer else 0)
    if worker_browser is not None:
        worker_browser.close()

    # A still image of the demo's image campaign rated at each width (a worker of its own per
    # width): the image instead of a video, the ratings open at once.
    report["stills"] = rate_still_images(walker, f"{campaign}-stills")

    # A webhook endpoint first, so that the releases and the run below send it their events.
    webhooks(walker, report, args.webhook_url)

    # Three workers rate the campaign; QC from the campaign page.
    report["ratings"] = rate_campaign(base, campaign)
    for result in report["ratings"]:
        if "error" in result:
            walker.problems.append(f"rating as {result['worker']}: {result['error']}")
    walker.open("annotation:campaign-list", "/dashboard/")
    for slug in (campaign, "vatex-eval"):
        walker.open("annotation:campaign-detail", f"/dashboard/campaigns/{slug}/")
    # QC of both campaigns from their pages: it keeps the judgments a release takes (the
    # imported slice's too) and sends the disagreement to the review queue.
    report["qc"] = {slug: run_qc(walker, slug) for slug in (campaign, "vatex-eval")}
    for route, tab in (
        ("annotation:quality-workers", "workers/"),
        ("annotation:review-queue", "review/"),
        ("annotation:leaderboard", "leaderboard/"),
        ("annotation:audit-log", "audit/"),
        ("annotation:preview", "preview/"),
        ("annotation:campaign-links", "links/"),
        ("annotation:campaign-edit", "edit/"),
    ):
        walker.open(route, f"/dashboard/campaigns/{campaign}/{tab}")
    walker.open("annotation:campaign-create", "/dashboard/campaigns/new/")
    wide.goto(walker.url(f"/dashboard/campaigns/{campaign}/workers/"))
    worker_page = first_link(wide, rf"/dashboard/campaigns/{campaign}/workers/\d+/")
    if worker_page:
        walker.open("annotation:quality-worker", worker_page)
    else:
        walker.problems.append("the workers page links to no worker")
    # Review: the next item through the queue's button, and its form.
    wide.goto(walker.url(f"/dashboard/campaigns/{campaign}/review/"))
    claim = wide.locator("form[action$='/claim-next/'] button[type=submit]")
    if claim.count():
        claim.click()
        wide.wait_for_load_state("networkidle")
    item = urlparse(wide.url).path
    if re.fullmatch(rf"/dashboard/campaigns/{campaign}/review/\d+/", item):
        walker.open("annotation:review-item", item)
        if not wide.locator("#resolve-form").count():
            walker.problems.append(f"{item}: no review form")
    else:
        walker.problems.append(f"the review queue gave no item (at {wide.url})")

    # The data browser and its detail pages.
    walker.open("annotation:data", "/dashboard/datasets/")
    for route, path, detail_route, detail in (
        ("annotation:browse-clips", "/dashboard/datasets/clips/", "annotation:browse-clip", r"/dashboard/datasets/clips/\d+/"),
        ("annotation:browse-candidates", f"/dashboard/datasets/candidates/?campaign={campaign}", "annotation:browse-candidate", r"/dashboard/datasets/candidates/\d+/"),
        ("annotation:browse-judgments", "/dashboard/datasets/judgments/", "", ""),
        ("annotation:browse-workers", "/dashboard/datasets/workers/", "", ""),
    ):  # fmt: skip
        walker.open(route, path)
        if detail_route:
            link = first_link(wide, detail)
            if link:
                walker.open(detail_route, link)
            else:
                walker.problems.append(f"{path} links to no {detail_route} page")

    # Import: the demo's scene file again (already imported: nothing new), followed to its end.
    walker.open("annotation:imports", "/dashboard/datasets/imports/")
    wide.goto(walker.url("/dashboard/datasets/imports/"))
    wide.select_option("#id_kind", "candidates")
    wide.set_input_files("#id_file", str(SCENES_FILE))
    wide.click("#import-form button[type=submit]")
    wide.wait_for_url(re.compile(r".*/dashboard/datasets/imports/\d+/$"))
    import_page = urlparse(wide.url).path
    wait_for(
        "the import",
        lambda: status_of(wide, walker.url(import_page)) == "finished",
        timeout=120,
    )
    report["import"] = {
        "page": import_page,
        "outcome": " ".join(wide.locator("#import-job").all_inner_texts())[:300],
    }
    walker.open("annotation:import-detail", import_page)

    # Releases: the VATEX-EVAL slice alone, then with the rated scenes, built through the form.
    walker.open("export:list", "/dashboard/releases/")
    releases = {}
    for name, slugs in (("walk: VATEX-EVAL slice", ["vatex-eval"]), ("walk: scenes and VATEX-EVAL", [campaign, "vatex-eval"])):  # fmt: skip
        wide.goto(walker.url("/dashboard/releases/"))
        wide.select_option("#id_campaigns", slugs)
        wide.fill("#id_name", name)
        wide.click("form[action$='/releases/new/'] button[type=submit]")
        wide.wait_for_url(re.compile(r".*/dashboard/releases/\d+/$"))
        path = urlparse(wide.url).path
        release_url = walker.url(path)
        wait_for(
            f"release {path}",
            lambda: status_of(wide, release_url) in ("succeeded", "failed", "cancelled"),  # noqa: B023
            timeout=300,
        )
        status = status_of(wide, walker.url(path))
        releases[name] = {
            "page": path,
            "status": status,
            "id": int(path.rstrip("/").rsplit("/", 1)[-1]),
        }
        if status != "succeeded":
            walker.problems.append(f"release {path} ended {status}")
            continue
        walker.open("export:detail", path)
        releases[name]["verified"] = verify_release(walker, path)
    report["releases"] = releases
    ids = [release["id"] for release in releases.values()]
    if len(ids) == 2:
        wide.goto(walker.url(f"/dashboard/releases/{ids[1]}/"))
        wide.select_option("#other", str(ids[0]))
        wide.click("select#other ~ button[type=submit]")
        wide.wait_for_load_state("networkidle")
        walker.open("export:compare", urlparse(wide.url).path)

    # The Metrics leaderboard (the tables `evaluate_metrics --save` stored; none in a fresh demo).
    walker.open("training_bridge:metrics-leaderboard", "/dashboard/training/metrics/")

    # Training: refused on the slice without video; the tiny model trained on the mixed release.
    walker.open("training_bridge:run-list", "/dashboard/training/")
    slice_release, mixed_release = (releases.get(name, {}) for name in releases)
    if slice_release.get("status") == "succeeded":
        with expecting_refusal(wide):
            start_run(wide, walker, slice_release["id"], "walk: VATEX-EVAL slice")
        refusal = wide.locator("#run-form .error, #run-form .errorlist").all_inner_texts()
        report["refused_run"] = " ".join(refusal)
        if "no clip with a video" not in report["refused_run"]:
            walker.problems.append(
                f"a run on release {slice_release['id']} was not refused: {wide.url}"
            )
    if mixed_release.get("status") != "succeeded":
        return
    start_run(wide, walker, mixed_release["id"], "walk: tiny")
    if not re.search(r"/dashboard/training/\d+/$", wide.url):
        walker.problems.append(f"the tiny run did not start: {wide.url}")
        return
    run_page = urlparse(wide.url).path
    message = " ".join(wide.locator(".messages li").all_inner_texts())
    started = time.monotonic()
    wait_for(
        "the tiny run",
        lambda: status_of(wide, walker.url(run_page)) in ("succeeded", "failed", "cancelled"),
        timeout=args.training_timeout,
        every=5,
    )
    run_status = status_of(wide, walker.url(run_page))
    report["run"] = {"page": run_page, "status": run_status, "message": message,
                     "seconds": round(time.monotonic() - started)}  # fmt: skip
    if run_status != "succeeded":
        error = " ".join(wide.locator(".error").all_inner_texts())
        walker.problems.append(f"the tiny run {run_page} ended {run_status}: {error[:500]}")
    walker.open("training_bridge:run-detail", run_page)
    run_id = run_page.rstrip("/").rsplit("/", 1)[-1]
    walker.open("training_bridge:run-compare", f"/dashboard/training/compare/?run={run_id}")
    wide.goto(walker.url(run_page))
    evaluate = wide.locator("form[action$='/evaluations/start/'] button[type=submit]")
    if evaluate.count():
        wide.select_option(
            "form[action$='/evaluations/start/'] select[name=campaign]", "vatex-eval"
        )
        evaluate.first.click()
        wide.wait_for_url(re.compile(r".*/dashboard/training/evaluations/\d+/$"))
        evaluation_page = urlparse(wide.url).path
        wait_for(
            "the evaluation",
            lambda: (
                status_of(wide, walker.url(evaluation_page)) in ("succeeded", "failed", "cancelled")
            ),
            timeout=300,
            every=3,
        )
        report["evaluation"] = {
            "page": evaluation_page,
            "status": status_of(wide, walker.url(evaluation_page)),
            "error": " ".join(wide.locator("details pre").all_inner_texts())[:500],
        }
        walker.open("training_bridge:evaluation-detail", evaluation_page)
    else:
        walker.problems.append(f"{run_page}: no form to evaluate the run")


def rate_still_images(walker: Walker, campaign: str) -> list[dict[str, Any]]:
    """Open the still-image campaign's worker page at each width, rate the image shown (or find
    the end screen on a second walk) and say what was seen."""
    seen = []
    for number, width in enumerate(VIEWPORTS, start=1):
        page = walker.new_page(width)
        worker = f"5f0c0ffee0ddba11c0ff1e{number:02d}"
        answer = page.goto(
            walker.url(
                f"/w/{campaign}/?PROLIFIC_PID={worker}&STUDY_ID=demo-study&SESSION_ID=stills"
            )
        )
        walker.check("worker:entry", page, width, status=answer.status if answer else 0)
        page.click("#start")
        page.wait_for_function(
            """() => {
              const still = document.querySelector("#still");
              const done = document.querySelector("#done");
              return (still && !still.hidden && still.complete && still.naturalWidth > 0
                      && document.querySelector("#candidates").children.length)
                || (done && !done.hidden);
            }""",
            timeout=60_000,
        )
        walker.check("worker:entry", page, width)
        if page.locator("#done").is_visible():
            seen.append({"width": width, "worker": worker, "rated": False})
            page.context.close()
            continue
        if page.locator("#candidates fieldset[disabled]").count():
            walker.problems.append(f"{campaign} at {width}: the image's ratings are locked")
        if page.locator("#clip").is_visible():
            walker.problems.append(f"{campaign} at {width}: a video player beside the image")
        for radio in page.locator("#candidates input[type=radio][value='4']").all():
            radio.check()
        page.get_by_role("button", name="Submit", exact=True).click()
        page.wait_for_function(
            """() => !document.querySelector("#done").hidden
                || document.querySelector("#progress-label").textContent.startsWith("Image 2")""",
            timeout=30_000,
        )
        walker.check("worker:entry", page, width)
        seen.append({"width": width, "worker": worker, "rated": True})
        page.context.close()
    return seen


def run_qc(walker: Walker, slug: str) -> str:
    """Press "Run QC now" on the campaign's page and wait for the run to end; its status."""
    page = walker.wide()
    path = walker.url(f"/dashboard/campaigns/{slug}/")
    page.goto(path)
    page.click("form[action$='/qc-runs/'] button[type=submit]")
    page.wait_for_load_state("networkidle")

    def latest() -> str:
        page.goto(path)
        cells = page.locator("#qc-h ~ table tbody tr").first.locator("td")
        return cells.nth(1).inner_text().strip() if cells.count() > 1 else ""

    wait_for(
        f"QC of {slug}",
        lambda: latest().startswith(("Succeeded", "Failed", "Cancelled")),
        timeout=300,
    )
    status = latest()
    if not status.startswith("Succeeded"):
        walker.problems.append(f"QC of {slug} ended {status}")
    return status


def start_run(page: Any, walker: Walker, release_id: int, name: str) -> None:
    page.goto(walker.url("/dashboard/training/"))
    page.select_option("#id_release", str(release_id))
    page.select_option("#id_backbone", "tiny")
    page.fill("#id_name", name)
    page.click("#run-form button[type=submit]")
    page.wait_for_load_state("networkidle")


def verify_release(walker: Walker, path: str) -> dict[str, Any]:
    """Download the release's zip through its page's link and check every member against the
    sha256 the page lists and `manifest.json` records."""
    page = walker.wide()
    page.goto(walker.url(path))
    listed = {}
    for row in page.locator("#files-heading ~ table tbody tr").all():
        cells = row.locator("td").all_inner_texts()
        listed[cells[0].strip()] = cells[2].strip()
    with page.expect_download() as download_info:
        page.click("#download-all")
    archive = zipfile.ZipFile(io.BytesIO(Path(download_info.value.path()).read_bytes()))
    members = {
        name.split("/", 1)[1]: archive.read(name) for name in archive.namelist() if "/" in name
    }
    manifest = json.loads(members.get("manifest.json", b"{}"))
    manifest_files: dict[str, str] = dict(manifest.get("files", {}))
    wrong = []
    for name, digest in listed.items():
        if name not in members:
            wrong.append(f"{name}: not in the zip")
        elif hashlib.sha256(members[name]).hexdigest() != digest:
            wrong.append(f"{name}: sha256 differs from the page's")
    for name, digest in manifest_files.items():
        if name in members and hashlib.sha256(members[name]).hexdigest() != digest:
            wrong.append(f"{name}: sha256 differs from manifest.json's")
    if not listed:
        wrong.append("the page lists no file")
    walker.problems.extend(f"release {path}: {problem}" for problem in wrong)
    return {"files": len(listed), "manifest_files": len(manifest_files), "problems": wrong}


def webhooks(walker: Walker, report: dict[str, Any], url: str) -> None:
    """The webhook pages, and an endpoint registered through them: the demo's own receiver when
    the demo has one (its page registers it in one click), else `url` through the form."""
    walker.open("webhooks:list", "/dashboard/webhooks/")
    page = walker.wide()
    receiver = page.context.request.get(walker.url(DEMO_RECEIVER)).status == 200
    report["demo_receiver"] = receiver
    if receiver:
        walker.open("webhooks:demo-receiver", DEMO_RECEIVER)
        page.goto(walker.url(DEMO_RECEIVER))
        register = page.locator("form[action$='/webhooks/new/'] button[type=submit]")
        if register.count():
            register.click()
            page.wait_for_load_state("networkidle")
        else:  # registered by an earlier walk
            page.goto(
                walker.url(page.locator("a[data-endpoint]").first.get_attribute("href") or "")
            )
    elif url:
        page.goto(walker.url("/dashboard/webhooks/"))
        page.fill("#id_url", url)
        page.fill("#id_description", "demo walk")
        page.click("form[action$='/webhooks/new/'] button[type=submit]")
        page.wait_for_load_state("networkidle")
    else:
        walker.problems.append("the demo has no webhook receiver and no --webhook-url was given")
        return
    detail = urlparse(page.url).path
    if re.fullmatch(r"/dashboard/webhooks/\d+/", detail):
        walker.open("webhooks:detail", detail)
        report["webhook"] = detail
    else:
        errors = " ".join(page.locator(".errorlist, .error").all_inner_texts())
        walker.problems.append(
            f"registering a webhook did not open its page ({page.url}): {errors}"
        )


def webhook_deliveries(walker: Walker, report: dict[str, Any]) -> None:
    """After the walk's releases and run: what the demo's receiver got (each signed)."""
    if not report.get("demo_receiver"):
        return
    walker.open("webhooks:demo-receiver", DEMO_RECEIVER)
    page = walker.wide()
    events = page.locator("li[data-received] [data-field=event]").all_inner_texts()
    signatures = page.locator("li[data-received] [data-field=signature]").all_inner_texts()
    report["deliveries_received"] = {"events": sorted(set(events)), "count": len(events)}
    if not events:
        walker.problems.append(f"{DEMO_RECEIVER}: no webhook delivery arrived during the walk")
    if any(signature.strip() != "valid" for signature in signatures):
        walker.problems.append(f"{DEMO_RECEIVER}: a delivery whose signature does not verify")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--base-url", default="http://127.0.0.1:8000")
    parser.add_argument("--username", default="curator")
    parser.add_argument("--password", required=True)
    parser.add_argument("--campaign", default="demo", help="Slug of the demo's crowd campaign.")
    parser.add_argument(
        "--screenshots",
        type=Path,
        default=Path(os.environ.get("LEPUS_VAR_DIR") or REPOSITORY / "var" / "demo") / "walk",
        help="Folder for the PNGs (default: walk/ in the demo's var directory).",
    )
    parser.add_argument(
        "--training-timeout", type=float, default=1500, help="Seconds (default 1500)."
    )
    parser.add_argument(
        "--webhook-url",
        default="",
        help="Without the demo's own webhook receiver: an endpoint to register through the "
        "webhooks page (one the server's settings accept).",
    )
    parser.add_argument("--json", action="store_true", help="Print the report as JSON.")
    args = parser.parse_args(argv)
    args.screenshots.mkdir(parents=True, exist_ok=True)

    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        parser.error(
            "the walk drives Chromium through Playwright, which requirements.txt does not list: "
            "pip install playwright (the version requirements-dev.txt pins)"
        )

    report: dict[str, Any] = {"base_url": args.base_url}
    started = time.monotonic()
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(
            executable_path=CHROMIUM, headless=True, args=CHROMIUM_ARGS
        )
        walker = Walker(browser, args.base_url, args.screenshots)
        try:
            for part in (
                lambda: walk(args, walker, report),
                lambda: webhook_deliveries(walker, report),
            ):
                try:
                    part()
                except Exception as error:  # this part stops; the next still runs
                    walker.problems.append(f"the walk stopped: {type(error).__name__}: {error}")
        finally:
            browser.close()
    opened = {visit.route for visit in walker.visits}
    for route in sorted(set(WALKED_ROUTES) - opened):
        walker.problems.append(f"{route}: not opened by the walk")
    report.update(
        ok=not walker.problems,
        seconds=round(time.monotonic() - started),
        problems=walker.problems,
        pages=[visit.__dict__ for visit in walker.visits],
    )
    if args.json:
        print(json.dumps(report, indent=2))
    else:
        for visit in walker.visits:
            mark = "ok " if not visit.problems else "BAD"
            print(f"  {mark} {visit.width:5} {visit.status or '':3} {visit.path}")
        for problem in walker.problems:
            print(f"PROBLEM: {problem}", file=sys.stderr)
        print(
            f"{len(walker.visits)} page views, {len(walker.problems)} problems, {report['seconds']} s"
        )
    return 0 if not walker.problems else 1


if __name__ == "__main__":
    sys.exit(main())
