"""The data browser at scale: every page type (each table's first page, filtered, sorted, a deep
page, and the clip, candidate and worker pages) timed with 1,000,000 judgments on PostgreSQL.

    python bench/data_browser.py                      # load (if needed) + 3 runs
    python bench/data_browser.py --judgments 30000    # a small version while developing
    flock /tmp/lepus-bench.lock python bench/data_browser.py --json

The world is `bench/qc_scale.py`'s (generated inside PostgreSQL: 1M judgments of 333,333
candidates of 111,111 clips by 10,000 workers, six captioning systems) in its own database
`<your database>_browsebench`; on top, the judgments of every 50th worker are marked excluded and
every candidate gets an aggregate (overall, range), so the filters and sorts have real values.

Each page is requested through Django's test client (URL routing, middleware, session, the view,
the queries and the template: everything but the socket) by a logged-in curator, `--repeat` times
per run after two warm-up requests, page types interleaved. A run reports p50 and p95 per page;
the headline is the median over `--runs` runs with min and max. The machine's load average is
recorded with every run (the machine is shared).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

import qc_scale  # noqa: E402  (the 1M-judgment world and its loader)
from provenance import write_raw  # noqa: E402

TARGET_MS = 300.0


def _database_url() -> str:
    return qc_scale._bench_database_url().removesuffix("_qcbench") + "_browsebench"


def _decorate() -> None:
    """Exclusions and aggregates on the loaded world (set-based, idempotent)."""
    from django.db import connection

    from annotation.models import CampaignCandidate, Judgment, Participation

    judgment, item = Judgment._meta.db_table, CampaignCandidate._meta.db_table
    with connection.cursor() as cursor:
        cursor.execute(
            f"UPDATE {judgment} SET is_excluded = TRUE, excluded_by = 'rule:too_fast', "
            f"exclusion_reason = 'bench', excluded_at = now() "
            f"WHERE mod(participation_id, 50) = 0 AND NOT is_excluded"
        )
        cursor.execute(
            f"UPDATE {Participation._meta.db_table} SET status = 'excluded' "
            f"WHERE mod(id, 50) = 0 AND status <> 'excluded'"
        )
        cursor.execute(
            f"UPDATE {item} SET judgments_total = 3, kept_judgments = 3, "
            f"overall = 1 + mod(id * 7919, 400) / 100.0, rating_range = mod(id, 5) "
            f"WHERE overall IS NULL"
        )
        cursor.execute("ANALYZE")


def _pages() -> dict[str, str]:
    """Page name -> URL, with cursors taken from the middle of each order (a deep page)."""
    from django.urls import reverse

    from annotation.curation.browse.pagination import cursor_encode
    from annotation.models import Campaign, CampaignCandidate, Judgment, Participation
    from datasets_app.models import CaptioningSystem, Clip

    campaign = Campaign.objects.get(slug=qc_scale.SLUG)
    judgments = reverse("annotation:browse-judgments")
    candidates = reverse("annotation:browse-candidates")
    clips = reverse("annotation:browse-clips")
    workers = reverse("annotation:browse-workers")
    total = Judgment.objects.count()
    middle = Judgment.objects.order_by("pk").values_list("pk", "created_at")[total // 2]
    item_middle = CampaignCandidate.objects.order_by("-overall", "-pk")[
        CampaignCandidate.objects.count() // 2
    ]
    clip_middle = Clip.objects.order_by("vatex_id")[Clip.objects.count() // 2]
    system = CaptioningSystem.objects.order_by("pk")[2]
    participation = Participation.objects.select_related("worker").order_by("pk")[
        Participation.objects.count() // 3 + 1
    ]
    judgment = Judgment.objects.order_by("pk")[total // 3]
    return {
        "judgments: first page": judgments,
        "judgments: campaign + criterion + rating": (
            f"{judgments}?campaign={campaign.slug}&criterion=relevance&rating=2"
        ),
        "judgments: worker": f"{judgments}?worker={participation.worker.external_id}",
        "judgments: system": f"{judgments}?system={system.pk}",
        "judgments: excluded": f"{judgments}?state=excluded",
        "judgments: sorted by time, oldest first": f"{judgments}?sort=created&order=asc",
        "judgments: deep page (id)": f"{judgments}?after={cursor_encode(middle[0], middle[0])}",
        "judgments: deep page (time)": (
            f"{judgments}?sort=created&after={cursor_encode(middle[1], middle[0])}"
        ),
        "judgments: 100 rows": f"{judgments}?size=100",
        "candidates: first page": candidates,
        "candidates: sorted by overall": f"{candidates}?sort=overall",
        "candidates: system + campaign": f"{candidates}?system={system.pk}&campaign={campaign.slug}",
        "candidates: deep page (overall)": (
            f"{candidates}?sort=overall&after={cursor_encode(item_middle.overall, item_middle.pk)}"
        ),
        "clips: first page": clips,
        "clips: campaign": f"{clips}?campaign={campaign.slug}",
        "clips: deep page": f"{clips}?after={cursor_encode(clip_middle.vatex_id, clip_middle.pk)}",
        "workers: first page": workers,
        "workers: excluded": f"{workers}?status=excluded",
        "workers: sorted by assignments": f"{workers}?sort=submitted",
        "detail: clip": reverse("annotation:browse-clip", args=[clip_middle.pk]),
        "detail: candidate": reverse(
            "annotation:browse-candidate", args=[judgment.campaign_candidate_id]
        ),
        "detail: worker": reverse(
            "annotation:quality-worker", args=[campaign.slug, participation.pk]
        ),
    }


def _percentile(values: list[float], share: float) -> float:
    ordered = sorted(values)
    index = min(len(ordered) - 1, max(0, round(share * (len(ordered) - 1))))
    return ordered[index]


def measure(*, repeat: int, runs: int) -> dict[str, Any]:
    from django.conf import settings
    from django.contrib.auth.models import Group, User
    from django.test import Client

    from common.permissions import CURATOR_GROUP

    settings.DEBUG = False  # no query log: it would grow with every request and cost time
    settings.ALLOWED_HOSTS = [*settings.ALLOWED_HOSTS, "testserver"]
    user, _ = User.objects.get_or_create(username="bench-curator")
    user.groups.add(Group.objects.get_or_create(name=CURATOR_GROUP)[0])
    client = Client()
    client.force_login(user)
    pages = _pages()
    for url in pages.values():
        for _ in range(2):
            response = client.get(url)
            if response.status_code != 200:
                raise SystemExit(f"{url} answered {response.status_code}")
    results: list[dict[str, Any]] = []
    for _ in range(runs):
        times: dict[str, list[float]] = {name: [] for name in pages}
        load_before = os.getloadavg()
        for _ in range(repeat):
            for name, url in pages.items():
                started = time.perf_counter()
                response = client.get(url)
                times[name].append((time.perf_counter() - started) * 1000)
                assert response.status_code == 200
        results.append(
            {
                "load_average_before": [round(v, 2) for v in load_before],
                "load_average_after": [round(v, 2) for v in os.getloadavg()],
                "pages": {
                    name: {
                        "p50_ms": round(_percentile(values, 0.5), 1),
                        "p95_ms": round(_percentile(values, 0.95), 1),
                        "max_ms": round(max(values), 1),
                    }
                    for name, values in times.items()
                },
            }
        )
    headline = {}
    for name in pages:
        p95 = [run["pages"][name]["p95_ms"] for run in results]
        p50 = [run["pages"][name]["p50_ms"] for run in results]
        headline[name] = {
            "p50_ms_median": statistics.median(p50),
            "p95_ms_median": statistics.median(p95),
            "p95_ms_min": min(p95),
            "p95_ms_max": max(p95),
            "under_target": statistics.median(p95) < TARGET_MS,
        }
    return {"urls": pages, "runs": results, "headline": headline, "repeat": repeat}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--judgments", type=int, default=1_000_000)
    parser.add_argument("--workers", type=int, default=10_000)
    parser.add_argument("--repeat", type=int, default=20, help="Requests per page and run.")
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--reload", action="store_true", help="Regenerate the data first.")
    parser.add_argument("--json", action="store_true", help="Print one JSON object.")
    options = parser.parse_args()
    database_url = _database_url()
    qc_scale._ensure_database(database_url)
    qc_scale._setup_django(database_url)
    from django.core.management import call_command

    from annotation.models import Judgment

    call_command("migrate", verbosity=0)
    report: dict[str, Any] = {"database": database_url.rpartition("/")[2]}
    expected = (options.judgments // 9) * 9
    if options.reload or Judgment.objects.count() != expected:
        report["load"] = qc_scale.load(
            judgments=options.judgments, workers=options.workers, spammer_every=50
        )
    _decorate()
    report["judgments"] = Judgment.objects.count()
    report["judgments_excluded"] = Judgment.objects.filter(is_excluded=True).count()
    report.update(measure(repeat=options.repeat, runs=options.runs))
    path = write_raw("data_browser", report, database=database_url)
    report["raw"] = str(path.relative_to(ROOT))
    if options.json:
        print(json.dumps(report, sort_keys=True))
        return
    print(
        f"{report['judgments']} judgments; p95 per page, median of {options.runs} runs [min, max]:"
    )
    for name, figures in report["headline"].items():
        mark = "" if figures["under_target"] else "  OVER 300 ms"
        print(
            f"  {name:45s} p50 {figures['p50_ms_median']:7.1f}  p95 {figures['p95_ms_median']:7.1f}"
            f" [{figures['p95_ms_min']:.1f}, {figures['p95_ms_max']:.1f}] ms{mark}"
        )


if __name__ == "__main__":
    main()
