"""Every output of a QC run over `bench/qc_scale.py`'s campaign, as sorted text files and one
digest per table, so two code versions can be compared on the same world.

    python bench/qc_outputs.py dump /tmp/qc-before      # after a cold run of the old code
    python bench/qc_outputs.py dump /tmp/qc-after       # after a cold run of the new code
    python bench/qc_outputs.py compare /tmp/qc-before /tmp/qc-after

Per table, every column is dumped except surrogate ids of rows a run creates (exclusions, audit
entries, review items, snapshots: their ids depend on the sequence) and timestamps (a run's own
clock), which are replaced by whether they are set. Tables: campaign candidates (aggregates,
slots, review states), judgments (exclusion flags, reasons, details), review items, campaign
clips (open slots), participations, worker QC statistics, worker exclusions, audit entries and
agreement snapshots.
"""

from __future__ import annotations

import argparse
import hashlib
import sys
from pathlib import Path

import psycopg2

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from worlds import bench_database_url  # noqa: E402

# table -> columns left out (besides timestamps, which become "is set" flags)
TABLES: dict[str, tuple[str, ...]] = {
    "annotation_campaigncandidate": (),
    "annotation_judgment": (),
    "annotation_reviewitem": ("id",),
    "annotation_campaignclip": (),
    "annotation_participation": (),
    "annotation_workerqcstats": ("id",),
    "annotation_workerexclusion": ("id",),
    "annotation_auditentry": ("id", "review_item_id", "undoes_id"),
    "annotation_agreementsnapshot": ("id", "qc_run_id"),
}
# JSON columns that hold the id of the exclusion row under "exclusion" / "exclusion_id".
ID_BEARING_JSON = {
    ("annotation_judgment", "exclusion_detail"),
    ("annotation_auditentry", "before"),
    ("annotation_auditentry", "after"),
}


def _select(cursor: psycopg2.extensions.cursor, table: str) -> str:
    cursor.execute(
        "SELECT column_name, data_type FROM information_schema.columns "
        "WHERE table_name = %s ORDER BY ordinal_position",
        [table],
    )
    parts = []
    for name, kind in cursor.fetchall():
        if name in TABLES[table]:
            continue
        if "timestamp" in kind or kind == "date":
            parts.append(f'("{name}" IS NOT NULL) AS "{name}_set"')
        elif (table, name) in ID_BEARING_JSON:
            # The exclusion row's id is recorded in these JSON objects; keep the rest.
            parts.append(f"(\"{name}\" - 'exclusion' - 'exclusion_id')::text AS \"{name}\"")
        else:
            parts.append(f'"{name}"::text')
    columns = ", ".join(parts)
    return (
        f"SELECT {columns} FROM {table} ORDER BY {', '.join(str(i + 1) for i in range(len(parts)))}"
    )


def dump(database_url: str, folder: Path) -> dict[str, str]:
    folder.mkdir(parents=True, exist_ok=True)
    connection = psycopg2.connect(database_url)
    digests = {}
    with connection.cursor() as cursor:
        for table in TABLES:
            path = folder / f"{table}.tsv"
            with path.open("w") as handle:
                cursor.copy_expert(f"COPY ({_select(cursor, table)}) TO STDOUT", handle)
            digests[table] = hashlib.sha256(path.read_bytes()).hexdigest()[:16]
            lines = sum(1 for _ in path.open())
            print(f"{table}: {lines} rows, {digests[table]}")
    connection.close()
    return digests


def compare(first: Path, second: Path) -> bool:
    same = True
    for table in TABLES:
        a, b = (folder / f"{table}.tsv" for folder in (first, second))
        equal = a.read_bytes() == b.read_bytes()
        same &= equal
        print(f"{table}: {'identical' if equal else 'DIFFERENT'}")
    return same


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("action", choices=["dump", "compare"])
    parser.add_argument("folders", nargs="+", type=Path)
    parser.add_argument("--database-url", default=None)
    options = parser.parse_args()
    if options.action == "dump":
        dump(
            options.database_url or bench_database_url("qcbench", "qc_outputs.py"),
            options.folders[0],
        )
    else:
        raise SystemExit(0 if compare(*options.folders[:2]) else 1)


if __name__ == "__main__":
    main()
