"""Cold QC runs of two code trees on one database, interleaved (A, B, A, B, ...), so that both
see the same load on a shared machine.

    flock /tmp/lepus-bench.lock python bench/qc_cold_ab.py --before /tmp/main-tree \
        --before-fillfactor 50 --pairs 2
    flock /tmp/lepus-bench.lock python bench/qc_cold_ab.py --before /tmp/main-tree \
        --before-fillfactor 30 --before-judgments indexed --pairs 3

`--before` is a checkout of the earlier code (e.g. `git archive main | tar -x -C DIR`, with this
tree's `bench/qc_scale.py` copied in); "after" is this tree. Both use the `qc_scale.py` database
(`<DATABASE_URL name>_qcbench`, loaded by `bench/qc_scale.py`). Before each run the campaign
candidate table gets the arm's fillfactor (the earlier code's migration set 50, this tree's sets
30), and with `--before-judgments indexed` the judgment table gets the storage of the code
before migration `annotation 0013` in the "before" arm (an index on `is_excluded`, default
fillfactor) and that of this tree in the "after" arm (no such index, fillfactor 85); then
`qc_scale.py --child reset` (QC results cleared, tables rewritten) and one cold `--child run`. Recorded per run: wall, CPU of the process and of its PostgreSQL backend, the
1-minute load average before and after, the candidate table's size after the reset (a reset that
could not drop dead rows, because another session's transaction held the horizon back, leaves it
larger) and its updates and HOT updates during the run.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "bench"))

from provenance import write_raw  # noqa: E402
from qc_scale import summarise  # noqa: E402
from worlds import bench_database_url  # noqa: E402

TABLE = "annotation_campaigncandidate"
JUDGMENTS = "annotation_judgment"
EXCLUDED_INDEX = "annotation_judgment_is_excluded_c1d08178"  # as migration 0001 named it
# The judgment table's storage before and after migration annotation 0013.
JUDGMENT_STORAGE = {
    "indexed": [
        f"CREATE INDEX IF NOT EXISTS {EXCLUDED_INDEX} ON {JUDGMENTS} (is_excluded)",
        f"ALTER TABLE {JUDGMENTS} RESET (fillfactor)",
    ],
    "in_place": [
        f"DROP INDEX IF EXISTS {EXCLUDED_INDEX}",
        f"ALTER TABLE {JUDGMENTS} SET (fillfactor = 85)",
    ],
}


def _sql(database_url: str, statement: str) -> list[tuple[Any, ...]]:
    import psycopg2

    connection = psycopg2.connect(database_url)
    connection.autocommit = True
    try:
        with connection.cursor() as cursor:
            cursor.execute(statement)
            return cursor.fetchall() if cursor.description else []
    finally:
        connection.close()


def _table_state(database_url: str, table: str = TABLE) -> dict[str, int]:
    size, updates, hot = _sql(
        database_url,
        f"SELECT pg_relation_size('{table}'), n_tup_upd, n_tup_hot_upd "
        f"FROM pg_stat_user_tables WHERE relname = '{table}'",
    )[0]
    return {"bytes": int(size), "updates": int(updates), "hot_updates": int(hot)}


def _child(tree: Path, database_url: str, mode: str) -> dict[str, Any]:
    environment = dict(os.environ, DJANGO_DEBUG="true")
    done = subprocess.run(
        [sys.executable, "bench/qc_scale.py", "--child", mode, "--database-url", database_url],
        cwd=str(tree),
        capture_output=True,
        text=True,
        env=environment,
    )
    if done.returncode != 0:
        sys.stderr.write(done.stderr[-4000:])
        raise SystemExit(f"{mode} failed in {tree}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def arm_run(
    tree: Path, database_url: str, fillfactor: int, judgments: str | None = None
) -> dict[str, Any]:
    _sql(database_url, f"ALTER TABLE {TABLE} SET (fillfactor = {fillfactor})")
    for statement in JUDGMENT_STORAGE.get(judgments or "", []):
        _sql(database_url, statement)
    _child(tree, database_url, "reset")
    before = {table: _table_state(database_url, table) for table in (TABLE, JUDGMENTS)}
    run = _child(tree, database_url, "run")
    after = {table: _table_state(database_url, table) for table in (TABLE, JUDGMENTS)}
    for key, table, setting in (
        ("candidate_table", TABLE, fillfactor),
        ("judgment_table", JUDGMENTS, judgments),
    ):
        run[key] = {
            "storage": setting,
            "bytes_after_reset": before[table]["bytes"],
            "bytes_after_run": after[table]["bytes"],
            "updates": after[table]["updates"] - before[table]["updates"],
            "hot_updates": after[table]["hot_updates"] - before[table]["hot_updates"],
        }
    return run


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--before", required=True, help="Directory of the earlier code.")
    parser.add_argument("--before-fillfactor", type=int, default=50)
    parser.add_argument("--after-fillfactor", type=int, default=30)
    parser.add_argument(
        "--before-judgments",
        choices=["indexed"],
        default=None,
        help="Give the before arm the judgment storage of the code before migration 0013 "
        "(and the after arm this tree's).",
    )
    parser.add_argument("--pairs", type=int, default=2)
    parser.add_argument("--note", default=None)
    options = parser.parse_args()
    database_url = bench_database_url("qcbench", "qc_cold_ab.py")
    after_judgments = "in_place" if options.before_judgments else None
    arms = {
        "before": (
            Path(options.before).resolve(),
            options.before_fillfactor,
            options.before_judgments,
        ),
        "after": (ROOT, options.after_fillfactor, after_judgments),
    }
    runs: dict[str, list[dict[str, Any]]] = {"before": [], "after": []}
    for pair in range(options.pairs):
        for name, (tree, fillfactor, judgments) in arms.items():
            runs[name].append(arm_run(tree, database_url, fillfactor, judgments))
            print(f"pair {pair + 1}, {name}: {runs[name][-1]['seconds']} s", file=sys.stderr)
    _sql(database_url, f"ALTER TABLE {TABLE} SET (fillfactor = {options.after_fillfactor})")
    for statement in JUDGMENT_STORAGE.get(after_judgments or "", []):
        _sql(database_url, statement)
    figures = {
        "before_tree": str(arms["before"][0]),
        "runs": runs,
        "summary": {name: summarise(values) for name, values in runs.items()},
    }
    write_raw("qc_cold_ab", figures, database=database_url, notes=options.note)
    print(json.dumps(figures["summary"], indent=1))


if __name__ == "__main__":
    main()
