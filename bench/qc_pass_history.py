"""The after-submission quality pass against the workers' history: one pass of N workers, each
with the same few new judgments, on campaigns whose workers have a short and a long history,
alternating two trees (A: `--base`, B: this tree) in one invocation.

    python bench/qc_pass_history.py --base /path/to/tree-before --histories 30,300 --rounds 3

For each history H the world is `bench/qc_scale.py`'s (three judgments per candidate, 1 in 50
workers a spammer), loaded with H × `--workers` judgments into this benchmark's own database
(`<DATABASE_URL's database>_qcpass`), QC'd once by a full run. Each timed pass (a fresh process
of the tree under test: `--child pass`) takes the same `--pass-workers` active workers spread
over the campaign, lowers the stored judgment count of each one's latest three candidates (a
submission the previous pass had not seen, as `qc_scale.py --profile --pass-workers` does) and
times `workers_quality_update` of them: wall, this process's CPU and the PostgreSQL backend's
CPU. One untimed pass per tree first. Order per round: A, B. Raw file: `qc_pass_history`.
On a tree with running per-worker statistics (migration 0019) the chosen workers' states are
rewound to the lowered watermark before the clock starts (`_states_rewind`; the other tree's
passes move the watermark without keeping them).
With QC_PASS_WARM=1 each child pass first runs the same pass untimed on its connection (and
sets it up again), so the timed pass finds a warm PostgreSQL backend, as a Celery worker that
keeps its connection does. With QC_PASS_PROFILE=<file> in the environment a child pass (`--child pass --tree T`) also
writes a cProfile of the pass (cumulative, top 60) to <file>.
Before the clock starts each pass warms the cache client and the campaign median's cache entry
(`campaign_median_seconds`), as a running Celery worker has them.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

BENCH_DIR = Path(__file__).resolve().parent
CURRENT = BENCH_DIR.parent
sys.path.insert(0, str(BENCH_DIR))

# At import, so the raw file's start load average is sampled when the script starts.
from provenance import cpu_seconds_of, write_raw  # noqa: E402


def _child_pass(tree: Path, database_url: str, pass_workers: int) -> dict[str, Any]:
    # The tree under test first: its `annotation` package is the one imported.
    sys.path.insert(0, str(tree))
    sys.path.insert(1, str(BENCH_DIR))
    os.environ["DATABASE_URL"] = database_url
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")
    os.environ.setdefault("DJANGO_DEBUG", "true")
    import django

    django.setup()
    from django.db import connection

    import annotation
    from annotation.models import Campaign, Judgment
    from annotation.quality import incremental

    assert Path(annotation.__file__).resolve().is_relative_to(tree.resolve())
    # qc_scale's pass set-up (the same workers, the same three candidates each). Importing it
    # puts this checkout first on sys.path, which only top-level packages not yet imported would
    # see: django.setup() has imported the tree's, and their submodules resolve inside them.
    from qc_scale import _pass_workers

    campaign = Campaign.objects.get(slug="qc-bench")
    chosen = _pass_workers(campaign, pass_workers)
    running = _states_rewind(campaign, chosen)
    if os.environ.get("QC_PASS_WARM"):
        # A long-lived connection (a Celery worker that keeps it between tasks): the backend
        # has planned the pass's statements and loaded their catalog entries once already.
        incremental.workers_quality_update(campaign=campaign, participation_ids=chosen)
        chosen = _pass_workers(campaign, pass_workers)
        running = _states_rewind(campaign, chosen)
    run_module = sys.modules["annotation.quality.run"].__file__
    assert run_module and Path(run_module).resolve().is_relative_to(tree.resolve())
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_backend_pid()")
        backend = int(cursor.fetchone()[0])
    history = Judgment.objects.filter(participation_id__in=chosen).count()
    # A Celery worker has the cache client imported and connected, and the campaign median
    # cached (60 s; passes run every 10 s): the same here, before the clock starts.
    from annotation.quality.loading import campaign_median_seconds

    campaign_median_seconds(campaign=campaign, excluding_participation_ids=chosen)
    profile_path = os.environ.get("QC_PASS_PROFILE")  # a cProfile of the pass, as text
    profiler = None
    if profile_path:
        import cProfile

        profiler = cProfile.Profile()
    wall, cpu, server = time.perf_counter(), time.process_time(), cpu_seconds_of(backend)
    if profiler is not None:
        profiler.enable()
    incremental.workers_quality_update(campaign=campaign, participation_ids=chosen)
    if profiler is not None:
        profiler.disable()
        _profile_write(profiler, Path(profile_path))
    return {
        "running_states_rewound": running,
        "pass_workers": len(chosen),
        "their_judgments": history,
        "wall_seconds": round(time.perf_counter() - wall, 4),
        "process_cpu_seconds": round(time.process_time() - cpu, 4),
        "backend_cpu_seconds": round(cpu_seconds_of(backend) - server, 4),
    }


def _profile_write(profiler: Any, path: Path) -> None:
    import io
    import pstats

    text = io.StringIO()
    pstats.Stats(profiler, stream=text).sort_stats("cumulative").print_stats(60)
    path.write_text(text.getvalue())


def _states_rewind(campaign: Any, chosen: list[int]) -> int:
    """On a tree with running statistics (migration 0019), the chosen workers' states as of the
    watermark `_pass_workers` lowered (their latest three judgments out), as the pass that set
    that watermark would have stored them; the other tree's passes do not keep them. Untimed.
    Returns the states written (0 on a tree without them)."""
    import numpy as np

    from annotation.models import WorkerQCStats

    if not any(f.name == "running_counts" for f in WorkerQCStats._meta.get_fields()):
        return 0
    from annotation.quality.loading import campaign_slice_load
    from annotation.quality.running_store import (
        running_states_load,
        running_states_write,
        slice_state,
        stored_sums_read,
    )

    _, _, marks = running_states_load(chosen)
    data = campaign_slice_load(campaign=campaign, judges=chosen)
    through = np.full(len(data.workers), -1)
    positions = np.searchsorted(data.workers.ids, chosen)
    through[positions] = marks[:, 0]
    judgments = data.judgments
    sums = stored_sums_read(
        campaign=campaign, candidate_ids=data.candidates.ids, questions=len(data.question_keys)
    )
    state = slice_state(data, judgments.ids <= through[judgments.worker], sums, ~judgments.excluded)
    running_states_write(chosen, state.take(positions))
    return len(chosen)


def _run_pass(tree: Path, database_url: str, pass_workers: int) -> dict[str, Any]:
    load = os.getloadavg()[0]
    output = subprocess.run(
        [
            sys.executable,
            str(Path(__file__).resolve()),
            "--child",
            "pass",
            "--tree",
            str(tree),
            "--database-url",
            database_url,
            "--pass-workers",
            str(pass_workers),
        ],
        capture_output=True,
        text=True,
        cwd=str(tree),
    )
    if output.returncode != 0:
        sys.stderr.write(output.stderr)
        raise SystemExit(f"the pass of tree {tree} failed")
    result = json.loads(output.stdout.strip().splitlines()[-1])
    result["load_average_before"] = round(load, 2)
    result["load_average_after"] = round(os.getloadavg()[0], 2)
    return result


def _commit(tree: Path) -> str:
    return subprocess.run(
        ["git", "-C", str(tree), "rev-parse", "HEAD"], capture_output=True, text=True, check=True
    ).stdout.strip()


def _summary(runs: list[dict[str, Any]]) -> dict[str, Any]:
    summary: dict[str, Any] = {}
    for key in ("wall_seconds", "process_cpu_seconds", "backend_cpu_seconds"):
        values = [run[key] for run in runs]
        summary[key] = {
            "median": round(statistics.median(values), 4),
            "min": min(values),
            "max": max(values),
        }
    return summary


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--base", type=Path, help="The tree before (A).")
    parser.add_argument(
        "--histories", default="30,300", help="Judgments per worker, comma-separated."
    )
    parser.add_argument("--workers", type=int, default=1000)
    parser.add_argument("--pass-workers", type=int, default=50)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--database-url", default=None)
    parser.add_argument("--child", choices=["pass"], default=None)
    parser.add_argument("--tree", type=Path, default=CURRENT)
    parser.add_argument("--note", default=None)
    options = parser.parse_args()
    if options.child:
        print(json.dumps(_child_pass(options.tree, options.database_url, options.pass_workers)))
        return
    if options.base is None or not (options.base / "annotation" / "quality").is_dir():
        raise SystemExit("--base must be a Lepus tree (the code before, A)")
    sys.path.insert(0, str(CURRENT))
    sys.path.insert(0, str(BENCH_DIR))
    from worlds import bench_database_url, ensure_database, run_child

    database_url = options.database_url or bench_database_url("qcpass", "qc_pass_history.py")
    ensure_database(database_url)
    environment = {**os.environ, "DATABASE_URL": database_url}
    subprocess.run(
        [sys.executable, "manage.py", "migrate", "-v", "0"],
        cwd=str(CURRENT),
        env=environment,
        check=True,
    )
    trees = {"A": options.base.resolve(), "B": CURRENT}
    report: dict[str, Any] = {
        "trees": {
            name: {"path": str(tree), "commit": _commit(tree)} for name, tree in trees.items()
        },
        "workers": options.workers,
        "pass_workers": options.pass_workers,
        "rounds": options.rounds,
        "histories": {},
    }
    for history in [int(value) for value in options.histories.split(",")]:
        judgments = history * options.workers
        loaded = run_child(
            str(BENCH_DIR / "qc_scale.py"),
            database_url,
            "load",
            "--judgments",
            str(judgments),
            "--workers",
            str(options.workers),
        )
        for tree in trees.values():  # untimed: the full run, and one pass per tree
            _run_pass(tree, database_url, options.pass_workers)
        runs: dict[str, list[dict[str, Any]]] = {name: [] for name in trees}
        for _ in range(options.rounds):
            for name, tree in trees.items():
                runs[name].append(_run_pass(tree, database_url, options.pass_workers))
                print(f"history {history}, {name}: {runs[name][-1]}", file=sys.stderr)
        report["histories"][str(history)] = {
            "load": loaded,
            "runs": runs,
            "summary": {name: _summary(rows) for name, rows in runs.items()},
        }
    write_raw("qc_pass_history", report, database=database_url, notes=options.note)
    print(json.dumps({h: v["summary"] for h, v in report["histories"].items()}, indent=1))


if __name__ == "__main__":
    main()
