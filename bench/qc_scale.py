"""Quality control at scale: a full QC recompute (worker statistics, rules and exclusions,
agreement before/after, review detection, aggregation) over 1,000,000 judgments of about 333,000
candidates by 10,000 workers, on PostgreSQL.

    python bench/qc_scale.py                      # load (if needed) + cold run + warm run
    python bench/qc_scale.py --judgments 30000    # a small version while developing
    flock /tmp/lepus-bench.lock python bench/qc_scale.py --json

Data is generated inside PostgreSQL (INSERT ... SELECT FROM generate_series, i.e. set-based, no
Python rows) into its own database `<your database>_qcbench`, which the script creates and
migrates. 2% of the workers are planted spammers (uniform 3s in under a second); honest workers
rate near the candidate's quality. Each measured run happens in a fresh child process so its
peak RSS (ru_maxrss) is the memory of the QC run alone plus Django and NumPy.
"""

from __future__ import annotations

import argparse
import json
import resource
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from provenance import write_raw  # noqa: E402  (Django-free; records commit, machine, versions)

SLUG = "qc-bench"
QUESTIONS = ("descriptiveness", "relevance", "fluency")


from worlds import (  # noqa: E402
    bench_database_url,
    campaign_skeleton,
    insert_select,
    load_unless_loaded,
    run_child,
    setup_django,
)


def load(*, judgments: int, workers: int, spammer_every: int) -> dict[str, Any]:
    from django.db import connection

    from annotation.models import Judgment

    started = time.perf_counter()
    campaign, candidates = campaign_skeleton(
        campaign_fields={"slug": SLUG, "name": "QC benchmark", "judgments_per_candidate": 3},
        judgments=judgments,
        workers=workers,
        systems=6,
        prefix="bench",
        seed=0.42,
    )
    clips = candidates // 3
    judgments = candidates * 3
    # Three distinct workers per candidate; every `spammer_every`-th worker is a spammer.
    truth = "(1 + mod(c * 2654435761, 5))"
    noise = (
        "(CASE WHEN random() < 0.06 THEN 2 * sign(random() - 0.5) ELSE round(random() * 2 - 1) END)"
    )
    honest_value = f"GREATEST(1, LEAST(5, {truth} + {noise}))::int"
    spam = f"(mod(w, {spammer_every}) = 0)"
    insert_select(
        Judgment,
        {
            "campaign_id": str(campaign.pk),
            "campaign_candidate_id": "c",
            "participation_id": "w",
            "values": (
                f"CASE WHEN {spam} THEN jsonb_build_object('descriptiveness', 3, 'relevance', 3, "
                f"'fluency', 3) ELSE jsonb_build_object('descriptiveness', {honest_value}, "
                f"'relevance', {honest_value}, 'fluency', {honest_value}) END"
            ),
            "source": "'crowd'",
            "server_ms": f"CASE WHEN {spam} THEN 300 + (random() * 400)::int "
            f"ELSE 6000 + (random() * 20000)::int END",
            "created_at": "now() - (random() * interval '20 days')",
        },
        f"(SELECT c, 1 + mod(c::bigint * 7919 + s * 3331, {workers})::int AS w "
        f"FROM generate_series(1, %s) AS c, generate_series(0, 2) AS s) AS pairs",
        [candidates],
    )
    with connection.cursor() as cursor:
        cursor.execute("ANALYZE")
    return {
        "clips": clips,
        "candidates": candidates,
        "judgments": judgments,
        "workers": workers,
        "spammers": workers // spammer_every,
        "load_seconds": round(time.perf_counter() - started, 1),
    }


def reset() -> None:
    """Back to the freshly loaded state: no exclusions, statistics, review items or aggregates."""
    from django.db import connection

    from annotation.models import (
        AgreementSnapshot,
        AuditEntry,
        CampaignCandidate,
        CampaignClip,
        Judgment,
        Participation,
        QCRun,
        ReviewItem,
        WorkerExclusion,
        WorkerQCStats,
    )

    with connection.cursor() as cursor:
        for model in (
            AuditEntry,
            ReviewItem,
            WorkerExclusion,
            WorkerQCStats,
            AgreementSnapshot,
            QCRun,
        ):
            cursor.execute(f"TRUNCATE {model._meta.db_table} CASCADE")
        cursor.execute(
            f"UPDATE {Judgment._meta.db_table} SET is_excluded = FALSE, excluded_by = '', "
            f"exclusion_reason = '', exclusion_detail = '{{}}', excluded_at = NULL "
            f"WHERE is_excluded"
        )
        cursor.execute(
            f"UPDATE {CampaignCandidate._meta.db_table} SET slots_taken = quota, "
            f"judgments_total = 0, kept_judgments = 0, means = '{{}}', overall = NULL, "
            f"normalized = NULL, training_class = NULL, rating_range = NULL, "
            f"is_finalised = FALSE, finalised_at = NULL, review_state = '', "
            f"resolution = '{{}}', dropped = FALSE"
        )
        cursor.execute(f"UPDATE {CampaignClip._meta.db_table} SET open_slots = 0")
        cursor.execute(
            f"UPDATE {Participation._meta.db_table} SET status = 'active' WHERE status <> 'active'"
        )
        cursor.execute("ANALYZE")


# ----------------------------------------------------------------------------------------------
# Measuring
# ----------------------------------------------------------------------------------------------


def measured_run() -> dict[str, Any]:
    """One full QC run in this process; prints its figures as JSON."""
    from annotation.models import Campaign
    from annotation.quality.run import qc_campaign_full

    campaign = Campaign.objects.get(slug=SLUG)
    rss_before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    started = time.perf_counter()
    summary = qc_campaign_full(campaign=campaign)
    seconds = time.perf_counter() - started
    return {
        "seconds": round(seconds, 2),
        "peak_rss_mb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1),
        "rss_before_run_mb": round(rss_before / 1024, 1),
        "workers": summary["workers"],
        "excluded_workers": len(summary["excluded"]),
        "judgments_excluded": summary["judgments_excluded"],
        "review_items": summary["review_items"],
        "candidates_updated": summary["candidates_updated"],
        "alpha": {
            key: {"before": round(value["alpha_all"], 4), "after": round(value["alpha_kept"], 4)}
            for key, value in summary["agreement"].items()
        },
        "phases": summary["timings"],
    }


def _child(database_url: str, mode: str, *extra: str) -> dict[str, Any]:
    return run_child(__file__, database_url, mode, *extra)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--judgments", type=int, default=1_000_000)
    parser.add_argument("--workers", type=int, default=10_000)
    parser.add_argument("--spammer-every", type=int, default=50, help="1 in N workers spams.")
    parser.add_argument("--reload", action="store_true", help="Regenerate the data first.")
    parser.add_argument("--json", action="store_true", help="Print one JSON object.")
    parser.add_argument("--database-url", default=None)
    parser.add_argument("--child", choices=["run", "load", "reset", "count"], default=None)
    options = parser.parse_args()
    database_url = options.database_url or bench_database_url("qcbench", "qc_scale.py")

    if options.child:
        setup_django(database_url)
        if options.child == "run":
            result = measured_run()
        elif options.child == "reset":
            reset()
            result = {"reset": True}
        elif options.child == "count":
            from annotation.models import Judgment

            result = {"judgments": Judgment.objects.count()}
        else:
            result = load(
                judgments=options.judgments,
                workers=options.workers,
                spammer_every=options.spammer_every,
            )
        print(json.dumps(result))
        return

    report: dict[str, Any] = {"database": database_url.rpartition("/")[2]}
    loaded = load_unless_loaded(
        __file__,
        database_url,
        judgments=options.judgments,
        reload=options.reload,
        load_arguments=[
            "--workers",
            str(options.workers),
            "--spammer-every",
            str(options.spammer_every),
        ],
    )
    if loaded is not None:
        report["load"] = loaded
    else:
        _child(database_url, "reset")
    report["cold"] = _child(database_url, "run")
    report["warm"] = _child(database_url, "run")
    write_raw("qc_scale", report, database=database_url)
    if options.json:
        print(json.dumps(report, sort_keys=True))
        return
    for name in ("cold", "warm"):
        run = report[name]
        print(
            f"{name}: {run['seconds']} s, peak RSS {run['peak_rss_mb']} MB; "
            f"{run['workers']} workers, {run['excluded_workers']} excluded, "
            f"{run['judgments_excluded']} judgments excluded, {run['review_items']} in review, "
            f"{run['candidates_updated']} candidates written; phases {run['phases']}"
        )


if __name__ == "__main__":
    main()
