"""Schemathesis against the OpenAPI schema the running server publishes at /api/schema/.

A live server on loopback serves seeded data (crowd campaigns with joined workers, judgments, a
review queue with an audit trail, QC runs, published and failed releases, training runs, score
requests). The `st run` CLI then fuzzes every operation twice, bounded in examples per operation
and in time: once anonymous (with random credentials in the security parameters), once as a
curator with a session and a crowd worker with a worker token, with path parameters drawn mostly
from the seeded ids so the authenticated run reaches past the 404s. Checks: no 5xx, every status
code, content type and body as the schema declares.

The cases come from a fixed seed, so CI runs the same cases every time and a failure reproduces;
`LEPUS_FUZZ_SEED=<n>` runs another set of cases and `LEPUS_FUZZ_SEED=random` a fresh one each
run (`make fuzz LEPUS_FUZZ_SEED=random`).
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import unquote, urlsplit

import pytest
import requests
from django.contrib.auth.models import User
from django.test import Client
from django.utils.crypto import get_random_string

from annotation.crowd.services.assignment import assignment_claim_next
from annotation.models import (
    Assignment,
    AuditEntry,
    CalibrationRun,
    ImportUpload,
    Participation,
    QCRun,
    ReviewItem,
    UploadKind,
)
from annotation.quality.review import review_resolve
from annotation.quality.run import qc_campaign_full
from common.models import JobStatus, WebhookEndpoint
from common.webhooks import new_secret
from export.models import Release
from tests.annotation.crowd_factories import crowd_campaign, crowd_join
from tests.annotation.quality.factories import quality_crowd_campaign, quality_judge, quality_worker
from tests.export.builders import build_campaign
from tests.export.helpers import build
from tests.support.processes import purge_broker
from training_bridge.models import RigelEvaluation, ScoreRequest, TrainingRun
from training_bridge.services import training_run_create

pytestmark = [pytest.mark.slow, pytest.mark.timeout(240)]

SCHEMATHESIS = Path(sys.executable).with_name("st")
# The endpoints strangers on the internet reach: more cases, and the coverage phase.
SUBMIT = "worker_assignment_submit"
CROWD_OPERATIONS = ("campaign_join", "worker_assignment_next", SUBMIT, "worker_me")
# Bounds in seconds: one schemathesis run (killed past it), and both runs together. On a busy
# 2-core machine the two runs take 50-75 s.
RUN_TIMEOUT_S = 120
BOTH_RUNS_S = 150
DEFAULT_SEED = "20261126"


def _seed_arguments() -> list[str]:
    seed = (os.environ.get("LEPUS_FUZZ_SEED") or DEFAULT_SEED).strip()
    if seed == "random":
        return []
    if not seed.isdigit():
        raise ValueError(f"LEPUS_FUZZ_SEED must be a number or 'random', not {seed!r}")
    return ["--seed", seed]


CHECKS = (
    "not_a_server_error",
    "status_code_conformance",
    "content_type_conformance",
    "response_schema_conformance",
)


@dataclass
class FuzzWorld:
    session_cookie: str
    worker_token: str
    # The worker the authenticated run's `worker_erase` erases (not `worker_token`'s: erasing
    # that one would leave the other worker operations nothing but 401s).
    erased_worker_token: str
    assignment_id: int  # the worker's live assignment
    # Path parameters drawn from these seeded values most of the time (random otherwise).
    ids: dict[str, list[int | str]]
    # Operations whose nested ids only exist under one parent: (path regex, fixed values).
    fixed: list[tuple[str, dict[str, int | str]]]


def _disputed_campaign(slug: str) -> list[ReviewItem]:
    """Three candidates whose ratings span 4, 3 and 2 points: the QC run queues two for review."""
    campaign = quality_crowd_campaign(slug=slug, clips=1, candidates_per_clip=3, quota=3)
    items = list(campaign.items.order_by("id"))
    keys = campaign.question_keys
    ratings = [[(1, 2, 3), (5, 2, 3), (3, 2, 3)], [(3, 3, 1), (3, 3, 4), (3, 3, 2)]]
    workers = [quality_worker(campaign, f"{slug}-w{index}") for index in range(3)]
    for item, rows in zip(items, ratings, strict=False):
        for worker, values in zip(workers, rows, strict=True):
            quality_judge(worker, item, dict(zip(keys, values, strict=True)))
    qc_campaign_full(campaign=campaign)
    return list(ReviewItem.objects.filter(campaign=campaign).order_by("id"))


@pytest.fixture
def fuzz_world(transactional_db, curator: User, settings) -> FuzzWorld:  # type: ignore[no-untyped-def]
    # Scoring waits for a training worker that does not run here; keep `wait` from holding a
    # request open for the default 30 s.
    settings.LEPUS_SCORE_MAX_WAIT = 1
    purge_broker()

    crowd = crowd_campaign(slug="fuzz", clips=3, candidates_per_clip=2, judgments_per_candidate=2)
    worker_token, participation = crowd_join(crowd, "fuzz-worker")
    offer = assignment_claim_next(participation=participation)
    assert offer is not None
    other_token, other = crowd_join(crowd, "fuzz-other-worker")
    assignment_claim_next(participation=other)

    review_items = _disputed_campaign("fuzz-review")
    resolved = review_items[0]
    review_resolve(
        item=resolved,
        user=curator,
        ratings={key: 3.0 for key in resolved.campaign.question_keys},
        note="fuzz seed",
    )

    released = build_campaign(slug="fuzz-release", clips=6, workers=4)
    first = build(campaigns=[released.campaign], seed=1)
    second = build(campaigns=[released.campaign], seed=2)
    failed = Release.objects.create(
        name="broken", ratios=[0.8, 0.2], status=JobStatus.FAILED, error="ValueError: boom"
    )
    failed.campaigns.set([released.campaign])
    qc_run = QCRun.objects.create(campaign=released.campaign, status=JobStatus.SUCCEEDED)
    calibration_run = CalibrationRun.objects.create(
        campaign=released.campaign, qc_run=qc_run, status=JobStatus.SUCCEEDED
    )

    queued_run = training_run_create(release=first, backbone="tiny", start=False)
    finished_run = training_run_create(release=first, backbone="tiny", start=False)
    TrainingRun.objects.filter(pk=finished_run.pk).update(status=JobStatus.SUCCEEDED)
    score = ScoreRequest.objects.create(run=finished_run, items=[], status=JobStatus.QUEUED)
    evaluation = RigelEvaluation.objects.create(
        runs=[finished_run.pk], campaign=released.campaign, protocols=["1-ref"]
    )

    client = Client()
    client.force_login(curator)
    slugs = ["fuzz", "fuzz-review", "fuzz-release"]
    participations = list(
        Participation.objects.filter(campaign=released.campaign).values_list("pk", flat=True)
    )
    return FuzzWorld(
        session_cookie=client.cookies["sessionid"].value,
        worker_token=worker_token,
        erased_worker_token=other_token,
        assignment_id=offer.assignment_id,
        fixed=[
            (r"/(review|audit)/\{", {"slug": "fuzz-review"}),
            (r"/quality/runs/\{run_id\}", {"slug": "fuzz-release", "run_id": qc_run.pk}),
            (
                r"/calibration/runs/\{run_id\}",
                {"slug": "fuzz-release", "run_id": calibration_run.pk},
            ),
            (r"/quality/workers/\{", {"slug": "fuzz-release"}),
            (r"/compare/", {"release_id": first.pk}),
        ],
        ids={
            "slug": slugs,
            "participation_id": participations,
            "item_id": [item.pk for item in review_items],
            "entry_id": list(AuditEntry.objects.values_list("pk", flat=True)),
            # Training runs only: the QC and calibration runs' endpoints have their ids pinned above, and an id that
            # is wrong for every other run_id endpoint would leave them 404 on unlucky draws.
            "run_id": [queued_run.pk, finished_run.pk],
            "release_id": [first.pk, second.pk, failed.pk],
            "other_id": [first.pk, second.pk],
            "assignment_id": list(Assignment.objects.values_list("pk", flat=True)),
            "request_id": [score.pk],
            "evaluation_id": [evaluation.pk],
            # An upload of the import page, refused (its job's status is what the page polls).
            "job_id": [
                ImportUpload.objects.create(
                    kind=UploadKind.CANDIDATES,
                    file_name="candidates.csv",
                    storage_key="imports/fuzz/candidates.csv",
                    status=JobStatus.FAILED,
                    error="candidates.csv, line 2: refused",
                ).pk
            ],
            # Two, so that a fuzzed DELETE of one still leaves the reads something to find.
            "endpoint_id": [
                WebhookEndpoint.objects.create(
                    url=f"https://hooks.example.org/lepus/{number}", secret=new_secret()
                ).pk
                for number in (1, 2)
            ],
        },
    )


def _toml_value(value: object) -> str:
    return json.dumps(value)  # JSON strings, numbers and arrays are valid TOML


def _config(
    *,
    folder: Path,
    headers: dict[str, str],
    ids: dict[str, list[int | str]],
    fixed: list[tuple[str, dict[str, int | str]]],
    examples: int,
    crowd_examples: int,
    assignment_id: int | None = None,
    erased_worker_token: str | None = None,
) -> Path:
    def generation(max_examples: int) -> list[str]:
        return [
            f"max-examples = {max_examples}",
            f"with-security-parameters = {'false' if headers else 'true'}",
            'database = "none"',
        ]

    lines = [
        "[cache]",
        "enabled = false",
        "[generation]",
        *generation(examples),
        "[phases.stateful]",
        "enabled = false",
        "[checks]",
        "enabled = false",
        *(f"[checks.{check}]\nenabled = true" for check in CHECKS),
    ]
    if headers:
        lines.append("[headers]")
        lines += [f"{_toml_value(name)} = {_toml_value(value)}" for name, value in headers.items()]
    # Most cases use a seeded id (so authenticated calls reach real rows), the rest stay random
    # (unknown ids: the 404 paths).
    lines.append("[dictionaries]")
    lines += [f"{name} = {{ values = {_toml_value(values)} }}" for name, values in ids.items()]
    lines.append("[parameters]")
    lines += [f'"path.{name}" = {{ dictionary = "{name}", probability = 0.8 }}' for name in ids]
    for path_regex, values in fixed:
        lines += [
            "[[operations]]",
            f"include-path-regex = {_toml_value(path_regex)}",
            "parameters = { "
            + ", ".join(f'"path.{name}" = {_toml_value(value)}' for name, value in values.items())
            + " }",
        ]
    # The endpoints strangers on the internet reach get more cases and the coverage phase
    # (boundary values of every field, missing and extra fields); on the curators' wide bodies
    # that phase takes minutes, so there it stays off.
    crowd = list(CROWD_OPERATIONS)
    if assignment_id is not None:
        # The submit body is what matters there: always the worker's live assignment, so the
        # coverage phase's hostile bodies reach validation instead of a 404.
        crowd.remove(SUBMIT)
        lines += [
            "[[operations]]",
            f"include-operation-id = {_toml_value(SUBMIT)}",
            *(f"generation.{line}" for line in generation(crowd_examples)),
            f'parameters = {{ "path.assignment_id" = {assignment_id} }}',
        ]
    if erased_worker_token is not None:
        lines += [
            "[[operations]]",
            'include-operation-id = "worker_erase"',
            f'headers = {{ "Authorization" = {_toml_value("Worker " + erased_worker_token)} }}',
        ]
    lines += [
        "[[operations]]",
        f"include-operation-id = {_toml_value(crowd)}",
        *(f"generation.{line}" for line in generation(crowd_examples)),
        "[[operations]]",
        f"exclude-operation-id = {_toml_value(CROWD_OPERATIONS)}",
        "phases.coverage.enabled = false",
    ]
    path = folder / "schemathesis.toml"
    path.write_text("\n".join(lines) + "\n")
    return path


@dataclass
class FuzzRun:
    report: dict
    statuses: dict[str, Counter[int]]  # per operation, e.g. "GET /api/v1/campaigns/{slug}/"
    seconds: float

    def operations_answering(self, predicate: Callable[[int], bool]) -> set[str]:
        return {
            operation
            for operation, statuses in self.statuses.items()
            if any(predicate(code) for code in statuses)
        }


def _fuzz(live_server_url: str, config: Path) -> FuzzRun:
    folder = config.parent
    started = time.monotonic()
    completed = subprocess.run(
        [
            str(SCHEMATHESIS),
            "--config-file",
            str(config),
            "run",
            f"{live_server_url}/api/schema/",
            "--workers",
            "2",
            "--request-timeout",
            "10",
            "--no-color",
            *_seed_arguments(),
            "--report",
            "json,har",
            "--report-json-path",
            str(folder / "report.json"),
            "--report-har-path",
            str(folder / "exchanges.har"),
        ],
        capture_output=True,
        text=True,
        cwd=folder,
        timeout=RUN_TIMEOUT_S,
        check=False,
    )
    seconds = time.monotonic() - started
    # The whole output goes to the captured output; the assertion message keeps its summary.
    print(completed.stdout, completed.stderr)
    summary = completed.stdout[completed.stdout.rfind("=== SUMMARY ===") :]
    assert completed.returncode == 0, summary + completed.stderr[-3000:]
    run = FuzzRun(
        report=json.loads((folder / "report.json").read_text()),
        statuses=_statuses(f"{live_server_url}/api/schema/", folder / "exchanges.har"),
        seconds=seconds,
    )
    print(f"{config.parent.name}: {run.report['test_cases']['generated']} cases in {seconds:.1f} s")
    for operation, statuses in sorted(run.statuses.items()):
        print(f"  {operation}: {dict(sorted(statuses.items()))}")
    assert run.report["operations"]["tested"] == run.report["operations"]["total"]
    assert len(run.statuses) == run.report["operations"]["total"]
    # Every operation was called (the HAR holds every exchange).
    assert [operation for operation, statuses in run.statuses.items() if not statuses] == []
    return run


def _statuses(schema_url: str, har: Path) -> dict[str, Counter[int]]:
    schema = requests.get(schema_url, params={"format": "json"}, timeout=10).json()
    routes = [
        (method.upper(), template, re.compile("^" + re.sub(r"{\w+}", "[^/]*", template) + "$"))
        for template, operations in schema["paths"].items()
        for method in operations
    ]
    seen: dict[str, Counter[int]] = {
        f"{method} {template}": Counter() for method, template, _ in routes
    }
    for entry in json.loads(har.read_text())["log"]["entries"]:
        path = unquote(urlsplit(entry["request"]["url"]).path)
        for method, template, pattern in routes:
            # Methods the operation lacks (the coverage phase tries them: 405) are left out.
            if method == entry["request"]["method"] and pattern.match(path):
                seen[f"{method} {template}"][entry["response"]["status"]] += 1
                break
    return seen


def _folder(tmp_path: Path, name: str) -> Path:
    folder = tmp_path / name
    folder.mkdir()
    return folder


def test_schemathesis_finds_no_server_error_and_no_undeclared_answer(
    fuzz_world: FuzzWorld, live_server, tmp_path: Path
) -> None:
    started = time.monotonic()
    try:
        anonymous = _fuzz(
            live_server.url,
            _config(
                folder=_folder(tmp_path, "anonymous"),
                headers={},
                ids=fuzz_world.ids,
                fixed=fuzz_world.fixed,
                examples=4,
                crowd_examples=15,
            ),
        )
        csrf = get_random_string(32)
        authenticated = _fuzz(
            live_server.url,
            _config(
                folder=_folder(tmp_path, "authenticated"),
                headers={
                    # A curator's session (with the CSRF pair Django wants on unsafe methods)
                    # and a crowd worker's token: each view reads only its own credentials.
                    "Cookie": f"sessionid={fuzz_world.session_cookie}; csrftoken={csrf}",
                    "X-CSRFToken": csrf,
                    "Authorization": f"Worker {fuzz_world.worker_token}",
                },
                ids=fuzz_world.ids,
                fixed=fuzz_world.fixed,
                examples=8,
                crowd_examples=20,
                assignment_id=fuzz_world.assignment_id,
                erased_worker_token=fuzz_world.erased_worker_token,
            ),
        )
    finally:
        purge_broker()  # releases, QC and training runs the fuzzer started stay unconsumed

    # Anonymous callers, even with the ids of real rows, reach nothing but the join endpoint.
    join = "POST /api/v1/campaigns/{slug}/join"
    assert anonymous.operations_answering(lambda code: code < 400) == {join}
    crowd = {operation for operation in anonymous.statuses if "/worker/" in operation}
    assert anonymous.operations_answering(lambda code: code == 401) == crowd
    # Authenticated, the fuzzer got past the permission checks: every read answered 2xx at least
    # once (seeded ids), and so did these writes.
    reads = {operation for operation in authenticated.statuses if operation.startswith("GET ")}
    succeeded = authenticated.operations_answering(lambda code: 200 <= code < 300)
    assert reads <= succeeded
    assert {
        "POST /api/v1/worker/assignments/next",
        "POST /api/v1/worker/erase",  # the other worker's token: `next` kept working
        "PATCH /api/v1/campaigns/{slug}/",
        "POST /api/v1/campaigns/{slug}/invites",
        "POST /api/v1/campaigns/{slug}/quality/runs",
    } <= succeeded
    print("authenticated, never 2xx:", sorted(set(authenticated.statuses) - succeeded))
    assert time.monotonic() - started < BOTH_RUNS_S
