"""Writing a release's files from a database snapshot: the split files in three formats, the
dataset card (README.md) and manifest.json. Pure function of (database state, release settings,
code version, pseudonym key): nothing here reads a clock or depends on dict order.
"""

from __future__ import annotations

import functools
import hashlib
import hmac
import io
import json
import logging
import queue
import resource
import shutil
import subprocess
import threading
import time
import tomllib
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.json as pa_json
import pyarrow.parquet as pq
from django.conf import settings
from django.template.loader import render_to_string

from common.db import is_postgresql
from export import portable
from export import snapshot as snapshot_queries
from export.models import SPLIT_NAMES, Release
from export.records import (
    PARQUET_COMPRESSION,
    PARQUET_COMPRESSION_LEVEL,
    PARQUET_PARSE_LINES,
    PARQUET_ROW_GROUP_ROWS,
    WORD_SPLIT_PATTERN,
    HashingWriter,
    RecordSchema,
    canonical_json,
    pseudonym,
    sha256_file,
)

FORMAT_VERSION = 1
DATASET_LICENSE = "bsd-3-clause-clear"
VATEX_EVAL_NOTICE = Path(settings.BASE_DIR) / "data" / "vatex_eval" / "NOTICE.md"
# Overall-score histogram bins of the card: [1.0, 1.5), [1.5, 2.0), ..., [4.5, 5.0].
SCORE_BINS = tuple(f"{1 + step / 2:.1f}–{1.5 + step / 2:.1f}" for step in range(8))
REVIEW_DECISION_ACTIONS = (
    "set_ratings",
    "exclude_judgment",
    "drop",
    "undo",
    "exclude_worker",
    "include_worker",
)

ProgressCallback = Callable[[float, str], None]
logger = logging.getLogger(__name__)


class PhaseTimer:
    """Logs how long each phase of a build took and the process's peak memory so far."""

    def __init__(self, release_id: int) -> None:
        self.release_id = release_id
        self.started = self.last = time.perf_counter()

    def done(self, phase: str) -> None:
        now = time.perf_counter()
        peak_mib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
        logger.info(
            "release %s: %s in %.2f s (total %.2f s, peak RSS %.0f MiB)",
            self.release_id,
            phase,
            now - self.last,
            now - self.started,
            peak_mib,
        )
        self.last = now


@functools.cache
def code_version() -> str:
    """`LEPUS_CODE_VERSION`, else `git describe --tags --always --dirty`, else the package version.

    Cached per process: it names the code that wrote the files and never includes a time.
    """
    configured = settings.LEPUS_CODE_VERSION.strip()
    if configured:
        return configured
    try:
        described = subprocess.run(
            ["git", "describe", "--tags", "--always", "--dirty"],
            cwd=settings.BASE_DIR,
            capture_output=True,
            text=True,
            timeout=10,
            check=False,
        )
        if described.returncode == 0 and described.stdout.strip():
            return f"git {described.stdout.strip()}"
    except (OSError, subprocess.SubprocessError):
        pass
    with open(Path(settings.BASE_DIR) / "pyproject.toml", "rb") as handle:
        project = tomllib.load(handle)["project"]
    return f"{project['name']} {project['version']}"


def release_queries() -> Any:
    """The reads of a build: streamed SQL on PostgreSQL, the portable Python module elsewhere."""
    return snapshot_queries if is_postgresql() else portable


def pseudonym_key() -> bytes:
    configured = settings.LEPUS_RELEASE_PSEUDONYM_SECRET
    if configured:
        return configured.encode()
    return hmac.new(
        settings.SECRET_KEY.encode(), b"lepus-release-pseudonyms", hashlib.sha256
    ).digest()


@dataclass
class BuildOutput:
    files: dict[str, str]
    total_bytes: int
    counts: dict[str, Any]
    stats: dict[str, Any]


class WordCounter:
    """Words of the candidates and of the references (each clip's references counted once),
    counted in Arrow from the record batches: no Python loop per caption."""

    def __init__(self) -> None:
        self.candidate_words = 0
        self.candidate_vocabulary: set[str] = set()
        self.references = 0
        self.reference_words = 0
        self.reference_vocabulary: set[str] = set()
        self._last_clip: str | None = None

    @staticmethod
    def _words(texts: pa.Array) -> tuple[int, set[str]]:
        """(number of words, distinct words) of the texts."""
        tokens = pc.list_flatten(
            pc.split_pattern_regex(pc.utf8_lower(texts), pattern=WORD_SPLIT_PATTERN)
        )
        # Leading and trailing separators leave empty tokens: not words.
        lengths = pc.binary_length(tokens).to_numpy(zero_copy_only=False)
        distinct = set(pc.unique(tokens).to_pylist())
        distinct.discard("")
        return int(np.count_nonzero(lengths)), distinct

    def add(self, table: pa.Table) -> None:
        if table.num_rows == 0:
            return
        count, distinct = self._words(table.column("text").combine_chunks())
        self.candidate_words += count
        self.candidate_vocabulary |= distinct
        # Rows are grouped by clip: the first row of each clip carries its references.
        clips = table.column("clip_id").combine_chunks()
        previous = pa.concat_arrays(
            [pa.array([self._last_clip], type=pa.string()), clips.slice(0, len(clips) - 1)]
        )
        first_of_clip = pc.fill_null(pc.not_equal(clips, previous), True)
        references = pc.list_flatten(
            table.column("references").combine_chunks().filter(first_of_clip)
        )
        self.references += len(references)
        count, distinct = self._words(references)
        self.reference_words += count
        self.reference_vocabulary |= distinct
        self._last_clip = clips[-1].as_py()


class ParquetConverter:
    """Turns one split's JSONL, batch by batch, into Parquet in a background thread.

    The main thread hands over each batch of lines as soon as it has written them; Arrow parses
    and encodes them (with the GIL released) while the database prepares the next batch. Lines
    are parsed in blocks of exactly PARQUET_PARSE_LINES and a row group is exactly
    PARQUET_ROW_GROUP_ROWS / PARQUET_PARSE_LINES blocks, so the Arrow chunks the writer sees, and
    with them the file's bytes, never depend on how the database batched the rows. The queue is
    bounded: memory stays flat however large the split is.
    """

    def __init__(self, *, target: Path, schema: RecordSchema, words: WordCounter) -> None:
        self.target = target
        self.arrow_schema = schema.arrow_schema()
        self.words = words
        self._queue: queue.Queue[list[bytes] | None] = queue.Queue(maxsize=3)
        self._error: BaseException | None = None
        self._thread = threading.Thread(target=self._run, name=f"parquet {target.name}")
        target.parent.mkdir(parents=True, exist_ok=True)
        self._thread.start()

    def submit(self, lines: list[bytes]) -> None:
        if self._error is not None:
            raise self._error
        self._queue.put(lines)

    def finish(self) -> None:
        self._queue.put(None)
        self._thread.join()
        if self._error is not None:
            raise self._error

    def abort(self) -> None:
        """Stop the thread after a failure elsewhere (its partial file is discarded)."""
        if self._thread.is_alive():
            self._queue.put(None)
            self._thread.join()

    def _run(self) -> None:
        pool = pa.system_memory_pool()  # returns freed buffers to the OS
        writer = pq.ParquetWriter(
            str(self.target),
            self.arrow_schema,
            compression=PARQUET_COMPRESSION,
            compression_level=PARQUET_COMPRESSION_LEVEL,
            use_dictionary=True,
            write_statistics=True,
            version="2.6",
            data_page_version="1.0",
            store_schema=True,
        )
        parse_options = pa_json.ParseOptions(
            explicit_schema=self.arrow_schema, unexpected_field_behavior="error"
        )
        buffered: list[bytes] = []
        group: list[pa.Table] = []

        def parse(lines: list[bytes]) -> None:
            block = b"\n".join(lines) + b"\n"
            table = pa_json.read_json(
                io.BytesIO(block),
                read_options=pa_json.ReadOptions(use_threads=False, block_size=len(block) + 1),
                parse_options=parse_options,
                memory_pool=pool,
            ).select(self.arrow_schema.names)
            self.words.add(table)
            group.append(table)
            if sum(part.num_rows for part in group) >= PARQUET_ROW_GROUP_ROWS:
                flush()

        def flush() -> None:
            if group:
                writer.write_table(pa.concat_tables(group), row_group_size=PARQUET_ROW_GROUP_ROWS)
                group.clear()

        try:
            while (lines := self._queue.get()) is not None:
                buffered.extend(lines)
                while len(buffered) >= PARQUET_PARSE_LINES:
                    parse(buffered[:PARQUET_PARSE_LINES])
                    del buffered[:PARQUET_PARSE_LINES]
            if buffered:
                parse(buffered)
            flush()
        except BaseException as error:
            self._error = error
            while self._queue.get() is not None:  # let a blocked submit() return
                pass
        finally:
            writer.close()


def _statistics(
    *,
    split_names: list[str],
    split_facts: dict[str, Any],
    words: WordCounter,
    judgments: dict[str, Any],
    agreement: dict[str, dict[str, Any]],
) -> dict[str, Any]:
    def ratio(numerator: float, denominator: int) -> float | None:
        return numerator / denominator if denominator else None

    splits = split_facts["splits"]
    candidates = sum(entry["candidates"] for entry in splits.values())
    clips = split_facts["clips"]
    return {
        "clips": clips,
        "candidates": candidates,
        "candidates_per_clip": {
            "min": split_facts["per_clip_min"],
            "max": split_facts["per_clip_max"],
            "mean": ratio(candidates, clips),
        },
        "candidate_words": {
            "vocabulary": len(words.candidate_vocabulary),
            "total": words.candidate_words,
            "mean_length": ratio(words.candidate_words, candidates),
        },
        "references": words.references,
        "reference_words": {
            "vocabulary": len(words.reference_vocabulary),
            "total": words.reference_words,
            "mean_length": ratio(words.reference_words, words.references),
        },
        "vocabulary_all_captions": len(words.candidate_vocabulary | words.reference_vocabulary),
        "judgments": judgments["judgments"],
        "judgments_per_candidate": {
            "min": judgments["judgments_per_candidate_min"],
            "max": judgments["judgments_per_candidate_max"],
            "mean": ratio(judgments["judgments"], candidates),
        },
        "annotators": judgments["annotators"],
        "imported_rater_slots": judgments["imported_rater_slots"],
        "agreement": agreement,
        "splits": {
            name: {
                "candidates": splits[index]["candidates"],
                "clips": splits[index]["clips"],
                "mean_overall": splits[index]["mean_overall"],
                "overall_histogram": dict(zip(SCORE_BINS, splits[index]["bins"], strict=True)),
                "class_histogram": {
                    str(value): splits[index]["classes"][value - 1] for value in range(1, 6)
                },
            }
            for index, name in enumerate(split_names)
        },
    }


def build_release_files(*, release: Release, root: Path, progress: ProgressCallback) -> BuildOutput:
    """Write every file of `release` under `root`; returns their hashes, counts and statistics."""
    batch_size = settings.LEPUS_RELEASE_BATCH_SIZE
    batch_delay = settings.LEPUS_RELEASE_BATCH_DELAY
    split_names = list(SPLIT_NAMES[: len(release.ratios)])
    campaign_ids = list(release.campaigns.values_list("pk", flat=True))
    files: dict[str, str] = {}
    words = WordCounter()
    timer = PhaseTimer(release.pk)

    db = release_queries()
    with db.open_snapshot(
        tag=f"{release.pk}_{release.attempts}", campaign_ids=campaign_ids
    ) as snapshot:
        progress(0.01, "selecting the finalised candidates")
        selection = db.select_items(snapshot)
        timer.done("selection")
        keys, campaigns = db.question_keys(snapshot)
        split_method = db.assign_splits(snapshot, seed=release.seed, ratios=release.ratios)
        db.check_values(snapshot, include_raw_judgments=release.include_raw_judgments)
        timer.done("splits")
        per_split = db.store_records(snapshot, release_id=release.pk)
        timer.done("release records")
        total = selection["released"]
        key = pseudonym_key()
        pseudonyms = {
            worker_pk: pseudonym(key, platform=platform, external_id=external_id)
            for worker_pk, (platform, external_id) in db.worker_identities(snapshot).items()
        }
        schema = RecordSchema(
            question_keys=keys, include_raw_judgments=release.include_raw_judgments
        )
        db.prepare_fragments(
            snapshot,
            pseudonyms=pseudonyms if release.include_raw_judgments else None,
            schema=schema,
        )
        timer.done("clip fragments")
        progress(0.1, f"writing {total} candidates")
        written = 0
        for index, name in enumerate(split_names):
            jsonl = HashingWriter(root / f"data/{name}.jsonl")
            csv = HashingWriter(root / f"csv/{name}.csv")
            csv.write(schema.csv_header.encode())
            converter = ParquetConverter(
                target=root / f"parquet/{name}.parquet", schema=schema, words=words
            )
            cursor = db.split_lines(snapshot, schema=schema, split=index, batch_size=batch_size)
            try:
                while rows := cursor.fetchmany(batch_size):
                    lines = [row[0] for row in rows]
                    converter.submit(lines)
                    jsonl.write(b"\n".join(lines) + b"\n")
                    csv.write(b"\n".join([row[1] for row in rows]) + b"\n")
                    written += len(rows)
                    progress(0.1 + 0.6 * written / max(total, 1), f"{written} of {total} written")
                    if batch_delay > 0:  # test-only: lets a test kill the worker mid-build
                        time.sleep(batch_delay)
                converter.finish()
            finally:
                converter.abort()
                cursor.close()
            files[f"data/{name}.jsonl"] = jsonl.close()
            files[f"csv/{name}.csv"] = csv.close()
            files[f"parquet/{name}.parquet"] = sha256_file(root / f"parquet/{name}.parquet")
            timer.done(f"{name} JSONL, CSV and Parquet")

        progress(0.72, "agreement and statistics")
        split_facts = db.split_statistics(snapshot, splits=len(split_names))
        timer.done("split statistics")
        judgments, agreement = db.judgments_and_agreement(
            snapshot, question_keys=keys, batch_size=batch_size
        )
        timer.done("judgments and agreement")
        source_list = db.sources(snapshot, judgment_batches=judgments["judgment_import_batches"])
        exclusion_facts = db.exclusions(snapshot)
        timer.done("sources and exclusions")

    stats = _statistics(
        split_names=split_names,
        split_facts=split_facts,
        words=words,
        judgments=judgments,
        agreement=agreement,
    )
    stats["excluded"] = selection["excluded"]
    stats["candidates_in_campaigns"] = selection["candidates_in_campaigns"]
    counts = {
        "splits": {
            name: per_split.get(index, {"candidates": 0, "clips": 0})
            for index, name in enumerate(split_names)
        },
        "released": selection["released"],
        "excluded": selection["excluded"],
        "candidates_in_campaigns": selection["candidates_in_campaigns"],
        "per_campaign": selection["per_campaign"],
    }
    includes_vatex_eval = any(source["kind"] == "vatex_eval" for source in source_list) or any(
        campaign["slug"] == "vatex-eval" for campaign in campaigns
    )
    if includes_vatex_eval:
        shutil.copyfile(VATEX_EVAL_NOTICE, root / "NOTICE.md")
        files["NOTICE.md"] = sha256_file(root / "NOTICE.md")

    excluded_workers = sorted(
        (
            {
                "campaign": entry["campaign"],
                "worker": pseudonyms.get(entry["worker_pk"], "unknown"),
                "decided_by": "curator" if entry["by_curator"] else "rules",
                "rules": entry["rules"],
                "judgments_excluded": entry["judgments_excluded"],
                "reasons": entry["reasons"],
            }
            for entry in exclusion_facts["workers"]
        ),
        key=lambda entry: (entry["campaign"], entry["worker"]),
    )
    review_by_campaign = exclusion_facts["audit"]
    review_decisions = sum(
        count
        for actions in review_by_campaign.values()
        for action, count in actions.items()
        if action in REVIEW_DECISION_ACTIONS
    )
    context = {
        "release": release,
        "split_names": split_names,
        "ratios": dict(zip(split_names, release.ratios, strict=True)),
        "stats": stats,
        "counts": counts,
        "campaigns": campaigns,
        "question_keys": keys,
        "split_method": split_method,
        "sources": source_list,
        "includes_vatex_eval": includes_vatex_eval,
        "includes_vatex": includes_vatex_eval
        or any(source["kind"] == "vatex" for source in source_list),
        "excluded_workers": len(excluded_workers),
        "review_decisions": review_decisions,
        "license": DATASET_LICENSE,
        "code_version": code_version(),
    }
    card = render_to_string("export/dataset_card.md", _card_context(context))
    (root / "README.md").write_bytes(card.encode("utf-8"))
    files["README.md"] = sha256_file(root / "README.md")

    manifest = {
        "dataset": "Vid-Lepus",
        "format_version": FORMAT_VERSION,
        "name": release.name,
        "seed": release.seed,
        "ratios": dict(zip(split_names, release.ratios, strict=True)),
        "split_method": split_method,
        "campaigns": campaigns,
        "question_keys": keys,
        "selection": {
            "candidates_in_campaigns": selection["candidates_in_campaigns"],
            "released": selection["released"],
            "excluded": selection["excluded"],
            "per_campaign": selection["per_campaign"],
            "rule": "a candidate is released when it is not a control, not dropped, not waiting "
            "for review, finalised (kept judgments >= quota, or resolved by review) and scored",
        },
        "splits": counts["splits"],
        "statistics": stats,
        "quality_control": {
            "excluded_workers": excluded_workers,
            "judgment_exclusions": exclusion_facts["judgment_exclusions"],
        },
        "review": {"decisions": review_decisions, "actions_by_campaign": review_by_campaign},
        "include_raw_judgments": release.include_raw_judgments,
        "pseudonyms": "w_ + the first 16 hex digits of HMAC-SHA256(key, '<platform>:<worker id>')"
        " with the deployment's release pseudonym key; stable across releases",
        "sources": source_list,
        "license": DATASET_LICENSE,
        "code_version": code_version(),
        "files": dict(sorted(files.items())),
    }
    manifest_text = canonical_json(manifest)
    (root / "manifest.json").write_bytes(manifest_text.encode("utf-8"))
    files["manifest.json"] = sha256_file(root / "manifest.json")
    total_bytes = sum((root / relative).stat().st_size for relative in files)
    timer.done("card and manifest")
    return BuildOutput(
        files=dict(sorted(files.items())), total_bytes=total_bytes, counts=counts, stats=stats
    )


def _fixed(value: float | None, digits: int) -> str:
    return "n/a" if value is None else f"{value:.{digits}f}"


def _card_context(context: dict[str, Any]) -> dict[str, Any]:
    """Numbers pre-formatted as strings, so the card never depends on localisation settings."""
    stats = context["stats"]
    split_names = context["split_names"]
    rows = [
        ("Clips", str(stats["clips"])),
        ("Candidate captions", str(stats["candidates"])),
        ("Candidates per clip (min)", str(stats["candidates_per_clip"]["min"])),
        ("Candidates per clip (max)", str(stats["candidates_per_clip"]["max"])),
        ("Candidates per clip (mean)", _fixed(stats["candidates_per_clip"]["mean"], 2)),
        ("Candidate vocabulary (words)", str(stats["candidate_words"]["vocabulary"])),
        ("Candidate total words", str(stats["candidate_words"]["total"])),
        ("Candidate mean length (words)", _fixed(stats["candidate_words"]["mean_length"], 2)),
        ("Reference captions", str(stats["references"])),
        ("Reference vocabulary (words)", str(stats["reference_words"]["vocabulary"])),
        ("Reference total words", str(stats["reference_words"]["total"])),
        ("Reference mean length (words)", _fixed(stats["reference_words"]["mean_length"], 2)),
        ("Vocabulary of all captions (words)", str(stats["vocabulary_all_captions"])),
        ("Judgments (kept)", str(stats["judgments"])),
        ("Judgments per candidate (mean)", _fixed(stats["judgments_per_candidate"]["mean"], 2)),
        ("Judgments per candidate (min)", str(stats["judgments_per_candidate"]["min"])),
        ("Judgments per candidate (max)", str(stats["judgments_per_candidate"]["max"])),
        ("Annotators", str(stats["annotators"])),
    ]
    agreement_rows = [
        (
            key,
            _fixed(entry["alpha"], 4),
            str(entry["items"]),
            str(entry["ratings"]),
        )
        for key, entry in stats["agreement"].items()
    ]
    split_rows = [
        (
            name,
            str(stats["splits"][name]["clips"]),
            str(stats["splits"][name]["candidates"]),
            _fixed(stats["splits"][name]["mean_overall"], 4),
            f"{context['ratios'][name]!r}",
        )
        for name in split_names
    ]
    histogram_rows = [
        (label, *[str(stats["splits"][name]["overall_histogram"][label]) for name in split_names])
        for label in SCORE_BINS
    ]
    class_rows = [
        (
            str(value),
            *[str(stats["splits"][name]["class_histogram"][str(value)]) for name in split_names],
        )
        for value in range(1, 6)
    ]
    excluded_rows = [
        (reason.replace("_", " "), str(count)) for reason, count in stats["excluded"].items()
    ]
    return {
        **context,
        "statistics_rows": rows,
        "agreement_rows": agreement_rows,
        "split_rows": split_rows,
        "histogram_rows": histogram_rows,
        "class_rows": class_rows,
        "excluded_rows": excluded_rows,
        "candidates_in_campaigns": str(stats["candidates_in_campaigns"]),
        "seed": str(context["release"].seed),
        "pretty_name_yaml": json.dumps(f"Vid-Lepus: {context['release'].name}", ensure_ascii=False),
        "imported_rater_slots": str(stats["imported_rater_slots"]),
    }
