"""Seed the Lepus side of the load benchmark: clips, references, candidates and one campaign.

Run by `bench/load_workers.py --compare ...` with the benchmark's own DATABASE_URL (a private
PostgreSQL cluster); never point it at a database you care about. It writes the rows directly with
the ORM (bulk inserts), so 1,000 clips x 3 candidates take a few seconds:

    python bench/lepus_bench_setup.py seed --clips 1000 --candidates-per-clip 3
    python bench/lepus_bench_setup.py campaign --slug bench-20 --judgments-per-candidate 3

Clips are marked `ready` with a `video_key` and a `poster_key`, but **the video files do not exist**:
the load test only needs the signed URLs that `next` hands out, never the bytes behind them.

`campaign` runs the project's `create_campaign` management command (the contract of issue 3). Both
print one JSON object on stdout.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO_ROOT))
sys.path.insert(0, str(REPO_ROOT / "bench"))
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")

import django  # noqa: E402

django.setup()

from django.core.management import call_command  # noqa: E402
from django.db import transaction  # noqa: E402
from load_workers import bench_candidates, bench_references  # noqa: E402

from datasets_app.models import (  # noqa: E402
    CandidateCaption,
    CaptioningSystem,
    Clip,
    ClipStatus,
    ReferenceCaption,
)

SYSTEM_NAME = "loadbench-system"


def seed(*, clips: int, candidates_per_clip: int, references_per_clip: int) -> dict[str, int]:
    system, _ = CaptioningSystem.objects.get_or_create(name=SYSTEM_NAME, version="1")
    existing = Clip.objects.filter(vatex_id__startswith="loadbench").count()
    if existing:
        return {"clips": existing, "created": 0}
    with transaction.atomic():
        clip_rows = Clip.objects.bulk_create(
            [
                Clip(
                    vatex_id=f"loadbench{index:05d}_000010_000020",
                    youtube_id=f"loadbench{index:05d}",
                    start_seconds=10.0,
                    end_seconds=20.0,
                    video_key=f"loadbench/clips/{index:05d}.mp4",
                    poster_key=f"loadbench/posters/{index:05d}.jpg",
                    duration=10.0,
                    width=640,
                    height=360,
                    status=ClipStatus.READY,
                )
                for index in range(clips)
            ],
            batch_size=1000,
        )
        ReferenceCaption.objects.bulk_create(
            [
                ReferenceCaption(clip=clip, position=position, text=text)
                for index, clip in enumerate(clip_rows)
                for position, text in enumerate(bench_references(index, references_per_clip))
            ],
            batch_size=5000,
        )
        CandidateCaption.objects.bulk_create(
            [
                CandidateCaption(
                    clip=clip,
                    external_id=f"loadbench:{index:05d}:{position}",
                    text=text,
                    system=system,
                    position=position,
                )
                for index, clip in enumerate(clip_rows)
                for position, text in enumerate(bench_candidates(index, candidates_per_clip))
            ],
            batch_size=5000,
        )
    return {"clips": len(clip_rows), "created": len(clip_rows)}


def campaign(*, slug: str, judgments_per_candidate: int) -> dict[str, object]:
    """The campaign through `create_campaign`, with the arguments of issue 3's contract."""
    from io import StringIO

    out = StringIO()
    call_command(
        "create_campaign",
        "--slug",
        slug,
        "--judgments-per-candidate",
        str(judgments_per_candidate),
        "--system",
        SYSTEM_NAME,
        "--json",
        stdout=out,
    )
    created = json.loads(out.getvalue().strip().splitlines()[-1])
    # Robots rate at random within milliseconds: quality control rightly excludes them ("too fast",
    # "uniform"), which would end the run. Every rule still runs after each submission (its CPU is
    # part of the measurement) but only flags.
    # Every rule, `low_agreement` included: random ratings rightly disagree with the other raters.
    from annotation.models import Campaign
    from annotation.quality.rules import DEFAULT_QC_RULES

    rules = {name: {"action": "flag"} for name in DEFAULT_QC_RULES}
    Campaign.objects.filter(slug=slug).update(qc_rules=rules)
    created["qc_rules"] = rules
    return created


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="action", required=True)
    seed_parser = sub.add_parser("seed")
    seed_parser.add_argument("--clips", type=int, default=1000)
    seed_parser.add_argument("--candidates-per-clip", type=int, default=3)
    seed_parser.add_argument("--references-per-clip", type=int, default=10)
    campaign_parser = sub.add_parser("campaign")
    campaign_parser.add_argument("--slug", required=True)
    campaign_parser.add_argument("--judgments-per-candidate", type=int, default=3)
    args = parser.parse_args()
    if args.action == "seed":
        result: dict[str, object] = dict(
            seed(
                clips=args.clips,
                candidates_per_clip=args.candidates_per_clip,
                references_per_clip=args.references_per_clip,
            )
        )
    else:
        result = campaign(slug=args.slug, judgments_per_candidate=args.judgments_per_candidate)
    sys.stdout.write(json.dumps(result) + "\n")


if __name__ == "__main__":
    main()
