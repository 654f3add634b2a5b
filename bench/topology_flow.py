"""The whole Lepus flow through a running production topology (started by `bench/topology.sh`).

    python bench/topology_flow.py --web URL1 --web URL2 --db-dsn DSN --redis-port P \\
        --curator NAME --curator-password PW --run-dir DIR --logs DIR [--clips 12] [--workers 8]

Run by `bench/topology.sh`, which exports the deployment's environment (DATABASE_URL, S3, ...) so the
management commands below talk to the same services as the servers. The steps, in order, each timed:

1. import    `import_vatex_eval` of the first N clips of the shipped VATEX-EVAL file;
2. videos    synthetic videos (ffmpeg testsrc), `attach_videos --upload-sources --wait`: the default
             worker reads the sources from S3, transcodes, writes video, poster and frames to S3;
3. campaign  `create_campaign --json` over those clips; the curator (HTTP) sets the QC rules;
4. judgments `bench/load_workers.py` with its simulated workers spread over both web servers
             until the campaign is complete; its correctness counts must all be 0;
5. qc        after-submission tasks drained, then a full QC run queued by the curator (HTTP) and
             run by the default worker;
6. review    the curator claims and resolves every review item (HTTP, alternating servers);
7. release   the curator cuts a release (HTTP); the default worker builds it on S3;
             `verify_release` re-hashes every file from S3;
8. training  the curator starts a tiny run on the release (HTTP); the training worker runs it on CPU;
9. beat      celery beat has sent its periodic tasks.

Prints one JSON object and exits 1 when a step failed or any correctness count is not 0.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import boto3
import psycopg2
import redis
import requests

# imported before anything runs: provenance takes the start load average and time at import
from provenance import input_checksums, write_raw  # bench/ is sys.path[0] when this script runs

REPO_ROOT = Path(__file__).resolve().parents[1]
VATEX_EVAL_FILE = REPO_ROOT / "data" / "vatex_eval" / "vid_cans_score_dict.json"
CAMPAIGN = "topology"
FINISHED = ("succeeded", "failed", "cancelled")
# A short run on the tiny random Qwen3-VL (the tests' settings, with fewer Phase 2 steps and no
# Phase 2 checkpoint in between: every one is a round of S3 writes).
TINY_TRAINING = {
    "frames": 4,
    "teacher_batch_size": 8,
    "teacher_shard_size": 32,
    "phase1_epochs": 3,
    "phase1_patience": 5,
    "phase2_batch_size": 8,
    "phase2_micro_batch_size": 4,
    "phase2_checkpoint_every": 50,
    "eval_batch_size": 8,
    # METEOR starts a JVM (~12 s of CPU); the metrics themselves are tested elsewhere.
    "standard_metrics": ["bleu4", "rougeL", "cider"],
}


class StepFailed(Exception):
    """A step of the flow did not do what it must."""


def log(message: str) -> None:
    sys.stderr.write(f"[topology {time.strftime('%H:%M:%S')}] {message}\n")
    sys.stderr.flush()


def check(condition: bool, message: str) -> None:
    if not condition:
        raise StepFailed(message)


def manage(*arguments: str, timeout: float = 600) -> dict[str, Any]:
    """An operator's management command with --json; returns its JSON object."""
    completed = subprocess.run(
        [sys.executable, "manage.py", *arguments, "--json"],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )
    lines = completed.stdout.strip().splitlines()
    if completed.returncode != 0 or not lines:
        raise StepFailed(
            f"manage.py {' '.join(arguments)} exited {completed.returncode}: "
            f"{(completed.stderr or completed.stdout).strip()[-800:]}"
        )
    return json.loads(lines[-1])


def wait_until(
    predicate: Callable[[], Any], *, timeout: float, what: str, interval: float = 0.5
) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() >= deadline:
            raise StepFailed(f"timed out after {timeout:.0f}s waiting for {what}")
        time.sleep(interval)


def assignments_per_worker(args: argparse.Namespace) -> int:
    """The campaign's cap: a little above an even share of its assignments (one assignment = one
    clip with all its candidates), so that the workers of one web server can never finish the
    campaign alone (both servers are certain to take submissions) and all of them still can."""
    return math.ceil(args.clips * args.judgments / args.workers) + 1


class Curator:
    """A curator's browser session, logged in once and used on every web server in turn: the
    session lives in PostgreSQL and the CSRF token in a cookie, so any server serves it."""

    def __init__(self, web: list[str], username: str, password: str) -> None:
        self.web = web
        self.turn = 0
        self.session = requests.Session()
        login = f"{web[0]}/accounts/login/"
        self.session.get(login, timeout=30).raise_for_status()
        response = self.session.post(
            login,
            data={
                "username": username,
                "password": password,
                "csrfmiddlewaretoken": self.session.cookies["csrftoken"],
            },
            headers={"Referer": login},
            allow_redirects=False,
            timeout=30,
        )
        check(response.status_code == 302, f"curator login answered {response.status_code}")
        self.requests_by_server: Counter[str] = Counter()

    def call(self, method: str, path: str, payload: Any = None, *, expect: tuple[int, ...]) -> Any:
        base = self.web[self.turn % len(self.web)]
        self.turn += 1
        self.requests_by_server[base] += 1
        response = self.session.request(
            method,
            f"{base}{path}",
            json=payload,
            headers={"X-CSRFToken": self.session.cookies.get("csrftoken", "")},
            timeout=60,
        )
        check(
            response.status_code in expect,
            f"{method} {base}{path} answered {response.status_code}: {response.text[:500]}",
        )
        return response.json() if response.content else None


class Flow:
    def __init__(self, args: argparse.Namespace) -> None:
        self.args = args
        self.web: list[str] = args.web
        self.steps: dict[str, dict[str, Any]] = {}
        self.failures: list[str] = []
        self.curator: Curator | None = None
        self.s3 = boto3.client(
            "s3",
            endpoint_url=os.environ["LEPUS_S3_ENDPOINT_URL"],
            region_name=os.environ.get("LEPUS_S3_REGION", "us-east-1"),
        )
        self.bucket = os.environ["LEPUS_S3_BUCKET"]
        self.load_report: dict[str, Any] = {}
        self.release_id: int | None = None
        self.started_at = time.strftime("%Y-%m-%dT%H:%M:%S%z")

    # --- helpers --------------------------------------------------------------------------------

    def sql(self, query: str, params: tuple = ()) -> list[tuple]:
        connection = psycopg2.connect(self.args.db_dsn)
        try:
            with connection.cursor() as cursor:
                cursor.execute(query, params)
                return list(cursor.fetchall())
        finally:
            connection.close()

    def s3_keys(self, prefix: str) -> dict[str, int]:
        keys: dict[str, int] = {}
        for page in self.s3.get_paginator("list_objects_v2").paginate(
            Bucket=self.bucket, Prefix=prefix
        ):
            keys.update({item["Key"]: item["Size"] for item in page.get("Contents", [])})
        return keys

    def queues_drained(self) -> bool:
        client = redis.Redis(host="127.0.0.1", port=self.args.redis_port, db=0)
        try:
            # kombu's Redis transport: a list per queue, and a hash of delivered-but-unacked tasks.
            return not client.llen("default") and not client.hlen("unacked")
        finally:
            client.close()

    def run_step(self, name: str, function: Callable[[], dict[str, Any]]) -> bool:
        log(f"step {name}")
        started = time.perf_counter()
        try:
            details = function()
            ok = True
        except (StepFailed, requests.RequestException, subprocess.TimeoutExpired) as error:
            details = {"error": str(error)}
            ok = False
            self.failures.append(f"{name}: {error}")
        seconds = round(time.perf_counter() - started, 2)
        self.steps[name] = {"ok": ok, "seconds": seconds, **details}
        log(f"step {name}: {'ok' if ok else 'FAILED'} in {seconds}s")
        return ok

    # --- the steps ------------------------------------------------------------------------------

    def import_data(self) -> dict[str, Any]:
        imported = manage(
            "import_vatex_eval", str(VATEX_EVAL_FILE), "--limit", str(self.args.clips)
        )
        check(imported.get("ok") is True, f"import refused: {imported}")
        created = imported["created"]
        check(created["clips"] == self.args.clips, f"imported {created['clips']} clips")
        return {
            "clips": created["clips"],
            "candidates": created["candidates"],
            "imported_judgments": created["judgments"],
        }

    def videos(self) -> dict[str, Any]:
        directory = Path(self.args.run_dir) / "videos"
        generated = manage(
            "make_demo_videos", "--clips", str(self.args.clips), "--out", str(directory)
        )
        attached = manage(
            "attach_videos",
            str(directory),
            "--upload-sources",
            "--wait",
            "--timeout",
            str(self.args.video_timeout),
            timeout=self.args.video_timeout + 60,
        )
        check(attached.get("status") == "succeeded", f"video job: {attached}")
        check(attached["ready"] == self.args.clips, f"{attached['ready']} clips ready: {attached}")
        rows = self.sql(
            "SELECT vatex_id, video_key, poster_key FROM datasets_app_clip WHERE status = 'ready'"
        )
        check(len(rows) == self.args.clips, f"{len(rows)} clips ready in the database")
        stored = self.s3_keys("")
        missing = [
            key for _, video, poster in rows for key in (video, poster) if not stored.get(key)
        ]
        check(not missing, f"not on S3: {missing[:5]}")
        head = self.s3.head_object(Bucket=self.bucket, Key=rows[0][1])
        return {
            "videos_written": generated.get("written"),
            "clips_ready": attached["ready"],
            "clips_failed": attached["failed"],
            "s3_objects": len(stored),
            "s3_bytes": sum(stored.values()),
            "video_content_type": head.get("ContentType"),
        }

    def campaign(self) -> dict[str, Any]:
        created = manage(
            "create_campaign",
            "--slug",
            CAMPAIGN,
            "--name",
            "Production topology",
            "--judgments-per-candidate",
            str(self.args.judgments),
            "--clips",
            str(self.args.clips),
            "--max-assignments-per-worker",
            str(assignments_per_worker(self.args)),
        )
        check(created["clips"] == self.args.clips, f"campaign over {created['clips']} clips")
        self.curator = Curator(self.web, self.args.curator, self.args.curator_password)
        # Simulated workers rate at random within milliseconds: the speed, uniformity and
        # agreement rules would rightly exclude them all (and reopen their slots forever). They still run after
        # every submission and in the QC run; here they only flag.
        rules = {
            name: {"action": "flag"}
            for name in ("too_fast", "uniform", "failed_controls", "low_agreement")
        }
        detail = self.curator.call(
            "PATCH", f"/api/v1/campaigns/{CAMPAIGN}/", {"qc_rules": rules}, expect=(200,)
        )
        check(detail["status"] == "active", f"campaign status {detail['status']}")
        return {
            "slug": created["slug"],
            "clips": created["clips"],
            "candidates": created["candidates"],
            "slots": detail["figures"]["slots_total"],
            "max_assignments_per_worker": detail["max_assignments_per_worker"],
        }

    def judgments(self) -> dict[str, Any]:
        command = [
            sys.executable,
            "bench/load_workers.py",
            "lepus",
            *[part for url in self.web for part in ("--base-url", url)],
            "--campaign",
            CAMPAIGN,
            "--workers",
            str(self.args.workers),
            "--duration",
            str(self.args.load_duration),
            "--db",
            self.args.db_dsn,
            *[part for pid in self.args.web_pid for part in ("--server-pid", str(pid))],
            "--db-server-pid",
            str(self.args.db_pid),
            "--clips",
            str(self.args.clips),
            "--judgments",
            str(self.args.judgments),
            "--json",
        ]
        completed = subprocess.run(
            command,
            cwd=REPO_ROOT,
            # Its raw provenance file goes beside the logs, not into the checkout's bench/results.
            env={**os.environ, "LEPUS_BENCH_RESULTS": str(self.args.logs)},
            capture_output=True,
            text=True,
            timeout=self.args.load_duration + 600,
            check=False,
        )
        Path(self.args.logs, "load_workers.log").write_text(completed.stderr)
        check(
            completed.returncode == 0,
            f"load_workers.py exited {completed.returncode}: {completed.stderr[-800:]}",
        )
        self.load_report = json.loads(completed.stdout.strip().splitlines()[-1])
        run = self.load_report["runs"][0]
        correctness = run["correctness"]
        check(run["correctness_all_zero"], f"correctness counts not all 0: {correctness}")
        by_server = run.get("acknowledged_by_base_url", {})
        check(
            len(by_server) == len(self.web) and all(by_server.values()),
            f"not every web server took submissions: {by_server}",
        )
        server_errors = {kind: n for kind, n in run["errors"].items() if ":5" in kind}
        transport = {kind: n for kind, n in run["errors"].items() if "transport" in kind}
        check(not server_errors and not transport, f"errors: {run['errors']}")
        candidates = self.sql(
            "SELECT count(*) FROM annotation_campaigncandidate cc JOIN annotation_campaign c "
            "ON c.id = cc.campaign_id WHERE c.slug = %s AND NOT cc.is_control",
            (CAMPAIGN,),
        )[0][0]
        check(
            correctness["candidates_complete"] >= candidates,
            f"campaign not complete: {correctness['candidates_complete']} of {candidates} "
            "candidates have their judgments (raise --load-duration?)",
        )
        return {
            "workers": run["workers"],
            "cycles": run["cycles"],
            "cycles_per_s": run["cycles_per_s"],
            "elapsed_s": run["elapsed_s"],
            "acknowledged_by_base_url": by_server,
            "errors": run["errors"],
            "candidates_complete": correctness["candidates_complete"],
        }

    def quality(self) -> dict[str, Any]:
        assert self.curator is not None
        drain_started = time.perf_counter()
        wait_until(self.queues_drained, timeout=300, what="the after-submission tasks")
        drained_s = round(time.perf_counter() - drain_started, 2)
        run = self.curator.call("POST", f"/api/v1/campaigns/{CAMPAIGN}/quality/runs", expect=(202,))

        def finished() -> dict[str, Any] | None:
            assert self.curator is not None
            detail = self.curator.call(
                "GET", f"/api/v1/campaigns/{CAMPAIGN}/quality/runs/{run['id']}", expect=(200,)
            )
            return detail if detail["status"] in FINISHED else None

        detail = wait_until(finished, timeout=300, what=f"QC run {run['id']}")
        check(detail["status"] == "succeeded", f"QC run {run['id']}: {detail}")
        summary = detail.get("summary") or {}
        return {
            "after_submission_drain_s": drained_s,
            "qc_run": run["id"],
            "workers": summary.get("workers"),
            "excluded_workers": len(summary.get("excluded", [])),
            "judgments_excluded": summary.get("judgments_excluded"),
            "review_items": summary.get("review_items"),
        }

    def review(self) -> dict[str, Any]:
        assert self.curator is not None
        base = f"/api/v1/campaigns/{CAMPAIGN}/review"
        resolved = 0
        while True:
            item = self.curator.call("POST", f"{base}/claim-next", expect=(200, 204))
            if item is None:
                break
            detail = self.curator.call("GET", f"{base}/{item['id']}", expect=(200,))
            kept: dict[str, list[float]] = {}
            for judgment in detail["judgments"]:
                if not judgment["is_excluded"]:
                    for key, value in judgment["values"].items():
                        kept.setdefault(key, []).append(value)
            # The expert settles each question on the median of the kept ratings.
            ratings = {key: float(statistics.median(values)) for key, values in kept.items()}
            self.curator.call(
                "POST",
                f"{base}/{item['id']}/resolve",
                {"ratings": ratings, "note": "settled on the median (topology run)"},
                expect=(200,),
            )
            resolved += 1
            check(resolved <= 10_000, "the review queue does not empty")
        queue = manage("review_queue", CAMPAIGN)
        check(queue["open"] == 0, f"review queue still has {queue['open']} items")
        return {
            "resolved": resolved,
            "queue_open": queue["open"],
            "queue_resolved": queue["resolved"],
        }

    def release(self) -> dict[str, Any]:
        assert self.curator is not None
        created = self.curator.call(
            "POST",
            "/api/v1/releases/",
            {"campaigns": [CAMPAIGN], "seed": 0, "ratios": [0.8, 0.2], "name": "topology"},
            expect=(202,),
        )
        self.release_id = created["id"]

        def finished() -> dict[str, Any] | None:
            assert self.curator is not None
            detail = self.curator.call("GET", f"/api/v1/releases/{self.release_id}/", expect=(200,))
            return detail if detail["status"] in FINISHED else None

        detail = wait_until(finished, timeout=300, what=f"release {self.release_id}")
        check(detail["status"] == "succeeded", f"release {self.release_id}: {detail}")
        # The API names the storage-relative key, never a bucket or a server path (issue 18); the
        # files themselves must be in the bucket under that key.
        check(
            detail["location"] == f"releases/{self.release_id}",
            f"release location {detail['location']}",
        )
        verified = manage("verify_release", str(self.release_id))
        check(verified["ok"] is True, f"verify_release: {verified}")
        on_s3 = self.s3_keys(f"{detail['location']}/")
        missing = [
            entry["path"]
            for entry in detail["files"]
            if f"{detail['location']}/{entry['path']}" not in on_s3
        ]
        check(not missing, f"release files not on S3: {missing}")
        splits = detail["counts"].get("splits", {})
        records = sum(split.get("candidates", 0) for split in splits.values())
        check(records > 0, f"empty release: {detail['counts']}")
        return {
            "release": self.release_id,
            "location": detail["location"],
            "files": len(detail["files"]),
            "s3_objects": len(on_s3),
            "bytes": detail["total_bytes"],
            "records_by_split": {name: split.get("candidates") for name, split in splits.items()},
            "verified": verified["ok"],
        }

    def training(self) -> dict[str, Any]:
        assert self.curator is not None
        check(self.release_id is not None, "no release to train on")
        created = self.curator.call(
            "POST",
            "/api/v1/training/runs",
            {
                "release": self.release_id,
                "backbone": "tiny",
                "device": "cpu",
                "name": "topology",
                "hyperparameters": TINY_TRAINING,
            },
            expect=(201, 202),
        )

        def finished() -> dict[str, Any] | None:
            assert self.curator is not None
            detail = self.curator.call(
                "GET", f"/api/v1/training/runs/{created['id']}", expect=(200,)
            )
            return detail if detail["status"] in FINISHED else None

        detail = wait_until(
            finished, timeout=self.args.training_timeout, what=f"training run {created['id']}"
        )
        check(
            detail["status"] == "succeeded",
            f"training run {created['id']}: {detail['status']} {detail.get('error', '')[:500]}",
        )
        artifacts = self.s3_keys(f"training/runs/{created['id']}/")
        check(bool(artifacts), f"no artifact of run {created['id']} on S3")
        log_lines = Path(self.args.logs, "worker-training.log").read_text(errors="replace")
        check(
            "training_bridge" in log_lines,
            "the training worker's log does not show the run's tasks",
        )
        return {
            "run": created["id"],
            "completed_steps": detail["completed_steps"],
            "validation": detail["metrics"].get("validation"),
            "s3_artifacts": len(artifacts),
        }

    def beat(self) -> dict[str, Any]:
        beat_log = Path(self.args.logs, "beat.log")

        def sent() -> list[str]:
            return [
                line for line in beat_log.read_text().splitlines() if "Sending due task" in line
            ]

        # Its shortest interval is 60 s: a fast run waits for the first beat here.
        lines = wait_until(sent, timeout=90, what="celery beat to send a periodic task")
        tasks = sorted({line.split("Sending due task ", 1)[1].split(" ")[0] for line in lines})
        return {"due_tasks_sent": len(lines), "tasks": tasks}

    # --- the whole --------------------------------------------------------------------------------

    def http_summary(self) -> dict[str, Any]:
        by_server: dict[str, dict[str, int]] = {}
        for index, url in enumerate(self.web, start=1):
            access = Path(self.args.logs, f"web{index}-access.log")
            statuses = Counter(
                line.split(" ", 1)[0] for line in access.read_text().splitlines() if line
            )
            by_server[url] = {
                "requests": sum(statuses.values()),
                "5xx": sum(n for code, n in statuses.items() if code.startswith("5")),
            }
        return {
            "by_server": by_server,
            "requests": sum(entry["requests"] for entry in by_server.values()),
            "5xx": sum(entry["5xx"] for entry in by_server.values()),
        }

    def run(self) -> dict[str, Any]:
        started = time.perf_counter()
        for name, function in (
            ("import", self.import_data),
            ("videos", self.videos),
            ("campaign", self.campaign),
            ("judgments", self.judgments),
            ("qc", self.quality),
            ("review", self.review),
            ("release", self.release),
            ("training", self.training),
            ("beat", self.beat),
        ):
            if not self.run_step(name, function):
                break
        http = self.http_summary()
        if http["5xx"]:
            self.failures.append(f"{http['5xx']} responses with a 5xx status")
        load_run = (self.load_report.get("runs") or [{}])[0]
        correctness = load_run.get("correctness", {})
        counts = {
            key: correctness.get(key)
            for key in (
                "over_quota_candidates",
                "over_quota_tasks",
                "repeated_clips_per_worker",
                "lost_submissions",
                "duplicated_submissions",
                "stored_without_acknowledgement",
                "served_twice_seen_by_clients",
                "acknowledged_ratings",
                "stored_ratings",
                "acknowledged_assignments",
            )
        }
        return {
            "benchmark": "production topology: the whole flow through bench/topology.sh",
            "ok": not self.failures,
            "failures": self.failures,
            "started_at": self.started_at,
            "machine": {"cpus": os.cpu_count(), "load_average": os.getloadavg()},
            "topology": {
                "web": self.web,
                "gunicorn": "2 servers x 2 workers x 4 threads (gthread)",
                "celery": ["worker -Q default -c 1", "worker -Q training -c 1", "beat"],
                "postgresql": self.args.db_dsn,
                "redis_port": self.args.redis_port,
                "s3": f"{os.environ['LEPUS_S3_ENDPOINT_URL']} bucket {self.bucket}",
            },
            "startup_s": self.args.startup_seconds,
            "flow_s": round(time.perf_counter() - started, 2),
            "total_s": round(self.args.startup_seconds + time.perf_counter() - started, 2),
            "steps": self.steps,
            "load": {
                "workers": load_run.get("workers"),
                "cycles": load_run.get("cycles"),
                "cycles_per_s": load_run.get("cycles_per_s"),
                "next": load_run.get("next"),
                "submit": load_run.get("submit"),
                "errors_total": load_run.get("errors_total"),
                "acknowledged_by_base_url": load_run.get("acknowledged_by_base_url"),
            },
            "correctness": counts,
            "http": http,
            "curator_requests_by_server": dict(self.curator.requests_by_server)
            if self.curator
            else {},
        }


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0],
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog=__doc__.split("\n\n", 1)[1],
    )
    parser.add_argument("--web", action="append", required=True, help="a web server's base URL")
    parser.add_argument("--web-pid", action="append", type=int, default=[])
    parser.add_argument("--db-pid", type=int, default=0)
    parser.add_argument("--db-dsn", required=True, help="libpq DSN of the deployment's database")
    parser.add_argument("--redis-port", type=int, required=True)
    parser.add_argument("--curator", required=True)
    parser.add_argument("--curator-password", required=True)
    parser.add_argument("--run-dir", required=True)
    parser.add_argument("--logs", required=True)
    parser.add_argument("--startup-seconds", type=float, default=0.0)
    parser.add_argument(
        "--clips", type=int, default=12, help="VATEX-EVAL clips (6 candidates each)"
    )
    parser.add_argument("--judgments", type=int, default=3, help="judgments per candidate")
    parser.add_argument("--workers", type=int, default=8, help="simulated crowd workers")
    parser.add_argument("--load-duration", type=float, default=120, help="load time limit (s)")
    parser.add_argument("--video-timeout", type=int, default=300)
    parser.add_argument("--training-timeout", type=float, default=300)
    parser.add_argument("--output", type=Path, help="also write the JSON summary to this file")
    args = parser.parse_args()
    inputs = input_checksums(vatex_eval=VATEX_EVAL_FILE)  # a missing file stops the run here
    busiest_server_workers = math.ceil(args.workers / len(args.web))
    if assignments_per_worker(args) * busiest_server_workers >= args.clips * args.judgments:
        parser.error("too few clips for this many workers: raise --clips or lower --workers")
    summary = Flow(args).run()
    text = json.dumps(summary, sort_keys=True)
    if args.output:
        args.output.parent.mkdir(parents=True, exist_ok=True)
        args.output.write_text(json.dumps(summary, indent=2, sort_keys=True) + "\n")
        # With its provenance (commit, command, machine, versions) beside it, for the docs.

        write_raw(
            "topology_flow",
            summary,
            directory=args.output.parent,
            inputs=inputs,
        )
    sys.stdout.write(text + "\n")
    for failure in summary["failures"]:
        log(f"FAILED {failure}")
    sys.exit(0 if summary["ok"] else 1)


if __name__ == "__main__":
    main()
