"""A release's split files: for each split, the JSONL (canonical records), the CSV and the Parquet
file, written in one pass over the lines the database produces, each hashed as it is written.

The Python process only moves bytes: the reads produce every JSONL and CSV line; Parquet is parsed
from the JSONL by Arrow in a background thread, which also counts the captions' words.
"""

from __future__ import annotations

import io
import queue
import threading
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pyarrow as pa
import pyarrow.json as pa_json
import pyarrow.parquet as pq
from django.conf import settings

from export.reads import ReleaseReads
from export.records import (
    PARQUET_COMPRESSION,
    PARQUET_COMPRESSION_LEVEL,
    PARQUET_PARSE_LINES,
    PARQUET_ROW_GROUP_ROWS,
    HashingWriter,
    RecordSchema,
    sha256_file,
)
from export.statistics import WordCounter

ProgressCallback = Callable[[float, str], None]


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


@dataclass(frozen=True)
class SplitFilesWritten:
    files: dict[str, str]  # {relative path: sha256}
    words: WordCounter


@dataclass(frozen=True)
class SplitWrite:
    """What writing a release's lines needs: the builder gathers it once for the split files and
    the explanations after them."""

    reads: ReleaseReads
    schema: RecordSchema
    split_names: list[str]
    root: Path
    total: int
    progress: ProgressCallback
    phase_done: Callable[[str], None]


def write_split_files(job: SplitWrite) -> SplitFilesWritten:
    """Write data/<split>.jsonl, csv/<split>.csv and parquet/<split>.parquet under `root` for every
    split; progress goes from 0.1 to 0.7 with the lines written."""
    reads, schema, root, total, progress = job.reads, job.schema, job.root, job.total, job.progress
    batch_size = settings.LEPUS_RELEASE_BATCH_SIZE
    files: dict[str, str] = {}
    words = WordCounter()
    written = 0
    for index, name in enumerate(job.split_names):
        jsonl = HashingWriter(root / f"data/{name}.jsonl")
        csv = HashingWriter(root / f"csv/{name}.csv")
        csv.write(schema.csv_header.encode())
        converter = ParquetConverter(
            target=root / f"parquet/{name}.parquet", schema=schema, words=words
        )
        cursor = reads.split_lines(schema=schema, split=index, batch_size=batch_size)
        try:
            while rows := cursor.fetchmany(batch_size):
                lines = [row[0] for row in rows]
                converter.submit(lines)
                jsonl.write(b"\n".join(lines) + b"\n")
                csv.write(b"\n".join([row[1] for row in rows]) + b"\n")
                written += len(rows)
                progress(0.1 + 0.6 * written / max(total, 1), f"{written} of {total} written")
            converter.finish()
        finally:
            converter.abort()
            cursor.close()
        files[f"data/{name}.jsonl"] = jsonl.close()
        files[f"csv/{name}.csv"] = csv.close()
        files[f"parquet/{name}.parquet"] = sha256_file(root / f"parquet/{name}.parquet")
        job.phase_done(f"{name} JSONL, CSV and Parquet")
    return SplitFilesWritten(files=files, words=words)
