"""docs/benchmarks.md and bench/ cannot drift apart (issue 27, point 6): every raw file the document
cites exists, every script a document or the Makefile names exists, and every raw file under
bench/results is cited (directly, as a log beside a cited file, or as a run a cited raw file names).

The document cites raw files in backticks, in the forms its authors use: a full path, a bare file
name, a glob (`engine_variants_h100_*_stop12_2026-11-26.json`), brace lists
(`issue26_d{1,2,3}_*`, `issue26_call{1..6}_console.txt`), an elided head (`…T111602Z_d6a3ba2`) and a
folder (`bench/results/issue24_ab/`)."""

from __future__ import annotations

import fnmatch
import json
import re
from collections.abc import Iterator
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
RESULTS = REPO / "bench" / "results"
BENCHMARKS_DOC = REPO / "docs" / "benchmarks.md"

# What a cited raw-file word ends with: an extension, a folder, a glob, or a run's time and commit.
_RAW_END = re.compile(r"\.(json|jsonl|txt)$|/$|_\*$|[0-9]Z_[0-9a-f]{7}(-dirty)?$")
_SCRIPT = re.compile(r"(?<![\w/.-])(?:\.[\w-]+/lepus/)?(bench/[\w/.-]+?\.(?:py|sh))\b")


def _expand_braces(text: str) -> list[str]:
    match = re.search(r"\{([^{}]*)\}", text)
    if match is None:
        return [text]
    inner = match.group(1)
    span = re.fullmatch(r"(\d+)\.\.(\d+)", inner)
    options = (
        [str(i) for i in range(int(span.group(1)), int(span.group(2)) + 1)]
        if span
        else inner.split(",")
    )
    expanded = []
    for option in options:
        expanded.extend(_expand_braces(text[: match.start()] + option + text[match.end() :]))
    return expanded


def cited_patterns(doc: str) -> list[str]:
    """The raw files a document cites, as globs relative to bench/results (a folder ends in /)."""
    doc = re.sub(r"^```.*?^```", "", doc, flags=re.S | re.M)
    patterns = []
    for span in re.finditer(r"`([^`]+?)`", doc):
        if "\n\n" in span.group(1):
            continue
        for word in span.group(1).split():
            if "<" in word or not (word.startswith("bench/results/") or re.search(r"\d", word)):
                continue
            for name in _expand_braces(word):
                name = name.replace("…", "*").replace("...", "*")
                if name.startswith("bench/results/"):
                    name = name.removeprefix("bench/results/")
                elif "/" in name:
                    continue
                if not name or not _RAW_END.search(name):
                    continue
                if name.startswith("_"):
                    name = "*" + name
                if not re.search(r"\.(json|jsonl|txt)$|/$|\*$", name):
                    name += "*"
                patterns.append(name)
    return patterns


def _matches(pattern: str, relative: str) -> bool:
    if pattern.endswith("/"):
        return relative.startswith(pattern)
    name = relative.rsplit("/", 1)[-1]
    return fnmatch.fnmatchcase(relative, pattern) or fnmatch.fnmatchcase(name, pattern)


def _raw_files() -> list[str]:
    return sorted(p.relative_to(RESULTS).as_posix() for p in RESULTS.rglob("*") if p.is_file())


def _raw_file_fields(value: object) -> Iterator[str]:
    """The `raw_file` entries of a raw file (scaling_curves names the runs of each size)."""
    if isinstance(value, dict):
        for key, item in value.items():
            if key == "raw_file" and isinstance(item, str):
                yield Path(item).name
            else:
                yield from _raw_file_fields(item)
    elif isinstance(value, list):
        for item in value:
            yield from _raw_file_fields(item)


def test_the_expansion_of_cited_names():
    doc = (
        "`bench/results/a_{x,y}.json`, `issue26_call{1..3}_console.txt`, `…T111602Z_d6a3ba2`, "
        "`bench/results/issue24_ab/`, `_run3.json`, `INSERT … VALUES`, `load_<date>.json`"
    )
    assert cited_patterns(doc) == [
        "a_x.json",
        "a_y.json",
        "issue26_call1_console.txt",
        "issue26_call2_console.txt",
        "issue26_call3_console.txt",
        "*T111602Z_d6a3ba2*",
        "issue24_ab/",
        "*_run3.json",
    ]


def test_every_raw_file_the_benchmarks_document_cites_exists():
    files = _raw_files()
    patterns = cited_patterns(BENCHMARKS_DOC.read_text())
    assert len(patterns) > 100
    missing = [p for p in patterns if not any(_matches(p, f) for f in files)]
    assert missing == [], f"docs/benchmarks.md cites raw files that bench/results lacks: {missing}"


def test_every_raw_file_is_cited_or_belongs_to_a_cited_one():
    files = _raw_files()
    patterns = cited_patterns(BENCHMARKS_DOC.read_text())
    cited = {f for f in files if any(_matches(p, f) for p in patterns)}
    named: set[str] = set()
    for relative in cited:
        if relative.endswith(".json"):
            named.update(_raw_file_fields(json.loads((RESULTS / relative).read_text())))
    cited_names = [Path(c).name.replace("_partial", "") for c in cited]
    uncited = []
    for relative in sorted(set(files) - cited):
        name = Path(relative).name
        beside = name.endswith("_log.txt") and any(
            c.startswith(name.removesuffix("_log.txt")) for c in cited_names
        )
        if not beside and name not in named:
            uncited.append(relative)
    assert uncited == [], (
        f"raw files that docs/benchmarks.md does not cite (cite them, or `git rm` them): {uncited}"
    )


def test_every_bench_script_the_documents_name_exists():
    """docs/, README.md, the Makefile, CI and scripts/ name bench scripts that exist (a removed
    script is named without its `bench/` path, as history)."""
    sources = [
        REPO / "README.md",
        REPO / "Makefile",
        *sorted((REPO / "docs").glob("*.md")),
        *sorted(p for p in (REPO / ".ci").glob("*") if p.is_file()),
        *sorted(p for p in (REPO / "scripts").rglob("*") if p.suffix in {".py", ".sh"}),
    ]
    named: dict[str, list[str]] = {}
    for source in sources:
        for match in _SCRIPT.finditer(source.read_text()):
            path = match.group(1)
            if not path.startswith("bench/results/"):
                named.setdefault(path, []).append(source.relative_to(REPO).as_posix())
    assert "bench/qc_scale.py" in named
    missing = {path: where for path, where in named.items() if not (REPO / path).exists()}
    assert missing == {}, f"documents name bench scripts that do not exist: {missing}"
