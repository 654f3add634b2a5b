"""METEOR 1.5 (Denkowski and Lavie, 2014) through its Java runtime, where that runtime exists.

METEOR aligns candidate and reference words by exact match, Porter stem, WordNet synonym and
paraphrase table, and scores the alignment with a recall-weighted F-mean and a fragmentation
penalty; with several references the best reference counts. Its reference implementation is a Java
program with large language resources, so Lepus does not re-implement it: it drives
`meteor-1.5.jar` (with its English paraphrase table next to it) in one long-lived subprocess in
`-stdio` mode, exactly as the COCO caption evaluation toolkit does (`-l en -norm`, 2 GB heap).

Where the runtime is missing (no `java` on the PATH, no jar), METEOR is *unavailable*: callers get
`MeteorUnavailable` with the reason, never a column of zeros.

The jar is found, in order: the `jar_path` argument, the `LEPUS_METEOR_JAR` environment variable,
then the copy shipped inside an installed `pycocoevalcap` package (a development dependency).
"""

from __future__ import annotations

import contextlib
import importlib.util
import os
import shutil
import subprocess
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType

import numpy as np

JAR_ENVIRONMENT_VARIABLE = "LEPUS_METEOR_JAR"
JAR_NAME = "meteor-1.5.jar"
# Items per SCORE/EVAL round trip. Each item's statistics line is under ~150 bytes, so a batch of
# replies stays well below a pipe buffer (64 KiB) and writing a batch cannot deadlock on stdout.
BATCH_SIZE = 200


class MeteorUnavailable(RuntimeError):
    """The METEOR runtime (Java and meteor-1.5.jar with its data) is not available here."""


@dataclass(frozen=True)
class MeteorRuntime:
    java: str
    jar: Path


def _packaged_jar() -> Path | None:
    spec = importlib.util.find_spec("pycocoevalcap")
    if spec is None or not spec.submodule_search_locations:
        return None
    for location in spec.submodule_search_locations:
        candidate = Path(location) / "meteor" / JAR_NAME
        if candidate.is_file():
            return candidate
    return None


def find_meteor_runtime(jar_path: str | os.PathLike[str] | None = None) -> MeteorRuntime:
    """The Java executable and the METEOR jar, or `MeteorUnavailable` saying what is missing."""
    java = shutil.which("java")
    if java is None:
        raise MeteorUnavailable("METEOR needs Java, and no `java` executable is on the PATH")
    configured = jar_path or os.environ.get(JAR_ENVIRONMENT_VARIABLE)
    jar = Path(configured) if configured else _packaged_jar()
    if jar is None:
        raise MeteorUnavailable(
            f"{JAR_NAME} not found: set {JAR_ENVIRONMENT_VARIABLE} or install pycocoevalcap"
        )
    if not jar.is_file():
        raise MeteorUnavailable(f"{jar} does not exist")
    if not (jar.parent / "data" / "paraphrase-en.gz").is_file():
        raise MeteorUnavailable(f"{jar.parent / 'data' / 'paraphrase-en.gz'} is missing")
    return MeteorRuntime(java=java, jar=jar)


def meteor_unavailable_reason(jar_path: str | os.PathLike[str] | None = None) -> str | None:
    """None when METEOR can run here, else why not."""
    try:
        find_meteor_runtime(jar_path)
    except MeteorUnavailable as error:
        return str(error)
    return None


def _clean(text: str) -> str:
    # "|||" separates fields of the stdio protocol and a newline ends a request.
    return " ".join(text.replace("|||", " ").split())


class MeteorScorer:
    """One METEOR process, reused for every call until `close()` (or the end of a `with` block)."""

    def __init__(
        self, jar_path: str | os.PathLike[str] | None = None, *, max_heap: str = "2G"
    ) -> None:
        self.runtime = find_meteor_runtime(jar_path)
        # stderr goes to a file: a pipe nobody reads could fill up and stall the jar.
        self._stderr = tempfile.TemporaryFile()  # noqa: SIM115 (closed in close())
        self._process = subprocess.Popen(
            [
                self.runtime.java,
                "-jar",
                f"-Xmx{max_heap}",
                str(self.runtime.jar),
                "-",
                "-",
                "-stdio",
                "-l",
                "en",
                "-norm",
            ],
            cwd=str(self.runtime.jar.parent),
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=self._stderr,
            text=True,
            encoding="utf-8",
        )

    def __enter__(self) -> MeteorScorer:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.close()

    def close(self) -> None:
        process = self._process
        if process.poll() is None:
            assert process.stdin is not None
            with contextlib.suppress(OSError):
                process.stdin.close()
            try:
                process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
        self._stderr.close()

    def _read_line(self) -> str:
        assert self._process.stdout is not None
        line = self._process.stdout.readline()
        if not line:
            self._stderr.seek(0)
            detail = self._stderr.read().decode("utf-8", "replace")[-2000:]
            raise RuntimeError(f"the METEOR process stopped: {detail.strip()}")
        return line.strip()

    def _send(self, line: str) -> None:
        assert self._process.stdin is not None
        self._process.stdin.write(line + "\n")
        self._process.stdin.flush()

    def scores(self, candidates: Sequence[str], references: Sequence[Sequence[str]]) -> np.ndarray:
        """Per-candidate METEOR of tokenised candidates against their references."""
        if len(candidates) != len(references):
            raise ValueError("one list of references per candidate is needed")
        result = np.zeros(len(candidates), dtype=np.float64)
        for start in range(0, len(candidates), BATCH_SIZE):
            stop = min(start + BATCH_SIZE, len(candidates))
            requests = []
            for index in range(start, stop):
                if not references[index]:
                    raise ValueError(f"candidate {index} has no reference")
                fields = [_clean(reference) for reference in references[index]]
                requests.append(" ||| ".join(["SCORE", *fields, _clean(candidates[index])]))
            self._send("\n".join(requests))
            statistics = [self._read_line() for _ in range(start, stop)]
            self._send(" ||| ".join(["EVAL", *statistics]))
            for index in range(start, stop):
                result[index] = float(self._read_line())
            self._read_line()  # the batch's corpus-level score, not used
        return result
