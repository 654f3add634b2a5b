"""Where a Celery worker's CPU goes during a crowd step (`bench/crowd_scale.py --py-spy BINARY`).

py-spy samples the worker and its prefork children from outside (`record --subprocesses
--nonblocking --format raw`: the processes are never paused, so the crowd's timings are not
disturbed), idle threads left out (a thread waiting on PostgreSQL's socket, or on the broker, is
idle), so every sample is a moment a Celery process ran Python or C code of its own. The
collapsed stacks are summed here by the task being run and, inside the quality passes, by the
step of the pass: Python CPU by task and step. What the database did for them is in the
statement record (`--pg-stat-statements`)."""

from __future__ import annotations

import subprocess
from collections import Counter
from pathlib import Path
from typing import Any

# The first of these function names found in a stack (root first) names its task.
TASKS = (
    ("quality_sweep", "sweep (every 5 min)"),
    ("quality_catch_up_active", "catch-up beat (every 10 s)"),
    ("quality_catch_up", "debounced pass"),
    ("quality_after_submission", "per-submission pass"),
    ("qc_run_execute", "full QC run"),
)
# Inside a pass: the deepest of these found in a stack names the step.
STEPS = (
    "late_judgments_exclude_all",
    "running_states_load",
    "watermarks_hold",
    "_touched_clip_candidates",
    "campaign_slice_load",
    "candidate_sums_load",
    "campaign_median_seconds",
    "stored_sums_read",
    "_updated",
    "statistics_from_state",
    "workers_evaluate",
    "workers_exclude",
    "aggregation_recompute",
    "agreement_push",
    "worker_stats_store",
    "running_states_write",
    "median_values_read",
    "median_values_write",
    "stale_aggregate_candidates",
)


def start(binary: str, pid: int, output: Path, *, seconds: float, rate: int = 100) -> Any:
    return subprocess.Popen(
        [
            binary,
            "record",
            "--pid",
            str(pid),
            "--subprocesses",
            "--nonblocking",
            "--format",
            "raw",
            "--rate",
            str(rate),
            "--duration",
            str(int(seconds)),
            "--output",
            str(output),
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )


def stop(process: Any, timeout: float = 60) -> str:
    try:
        _out, error = process.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        process.terminate()
        _out, error = process.communicate()
    return (error or b"").decode(errors="replace")[-2000:]


def celery_task_totals(env: dict[str, str], cwd: Path) -> dict[str, int]:
    """Tasks each Celery worker has received since it started, summed by name (`celery inspect
    stats`); {} when the worker does not answer."""
    import json
    import sys

    try:
        done = subprocess.run(
            [
                str(Path(sys.executable).with_name("celery")),
                "-A",
                "config",
                "inspect",
                "stats",
                "-j",
            ],
            env=env,
            cwd=cwd,
            capture_output=True,
            text=True,
            timeout=60,
        )
        replies = json.loads(done.stdout[done.stdout.index("{") :])
    except (subprocess.SubprocessError, ValueError):
        return {}
    totals: Counter[str] = Counter()
    for reply in replies.values():
        totals.update(reply.get("total", {}))
    return dict(totals)


def _frames(stack: str) -> list[str]:
    """Function names of a collapsed stack (`process;frame (file:line);...`), root first."""
    return [frame.split(" (", 1)[0].strip() for frame in stack.split(";")]


def summarize(path: Path, *, rate: int, cycles: int) -> dict[str, Any]:
    """Samples by task, and by step inside the passes, as CPU ms and ms per crowd cycle."""
    by_task: Counter[str] = Counter()
    by_step: Counter[str] = Counter()
    leaves: Counter[str] = Counter()
    total = 0
    for line in path.read_text().splitlines():
        stack, _, count_text = line.rpartition(" ")
        if not stack or not count_text.isdigit():
            continue
        count = int(count_text)
        total += count
        names = _frames(stack)
        task = next((label for name, label in TASKS if name in names), "celery itself")
        by_task[task] += count
        if task != "celery itself":
            step = next((name for name in reversed(names) if name in STEPS), "other")
            by_step[f"{task}: {step}"] += count
            leaves[f"{task}: {names[-1]}"] += count
    milliseconds = 1000.0 / rate

    def table(counter: Counter[str], limit: int | None = None) -> dict[str, Any]:
        return {
            key: {
                "samples": value,
                "cpu_ms": round(value * milliseconds, 1),
                "ms_per_cycle": round(value * milliseconds / cycles, 4) if cycles else None,
            }
            for key, value in counter.most_common(limit)
        }

    return {
        "rate_hz": rate,
        "samples": total,
        "cpu_ms": round(total * milliseconds, 1),
        "ms_per_cycle": round(total * milliseconds / cycles, 4) if cycles else None,
        "by_task": table(by_task),
        "by_pass_step": table(by_step),
        "top_leaf_functions": table(leaves, 25),
    }
