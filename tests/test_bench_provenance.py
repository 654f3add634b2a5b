"""Benchmark provenance (issue 17, point 1): every benchmark writes a raw file through
bench/provenance.py, and that file holds what a sceptical reader needs to reproduce a figure."""

from __future__ import annotations

import ast
import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
BENCH = REPO / "bench"
sys.path.insert(0, str(BENCH))

import provenance  # noqa: E402

# Scripts under bench/ that measure nothing themselves, with the reason.
NOT_BENCHMARKS = {
    "provenance.py": "the provenance module itself",
    "worlds.py": "a library: the world builder the QC and calibration benchmarks share",
    "lepus_bench_setup.py": "set-up commands (seed, campaign) that the load benchmarks call",
    "make_vatex_clips.py": "writes the MP4 clips the GPU benchmarks decode",
    "trace_gaps.py": "reads the chrome trace of a profiled gpu_rigel.py run (whose raw file it is)",
    "stack_profile.py": "sums py-spy's stacks for crowd_scale.py --py-spy (whose raw file holds them)",
}


def _benchmark_scripts() -> list[Path]:
    scripts = [*BENCH.glob("*.py"), *(BENCH / "gpu").glob("*.py")]
    return sorted(path for path in scripts if path.name not in NOT_BENCHMARKS)


def _calls(tree: ast.AST) -> set[str]:
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Call):
            function = node.func
            if isinstance(function, ast.Name):
                names.add(function.id)
            elif isinstance(function, ast.Attribute):
                names.add(function.attr)
    return names


def test_every_benchmark_script_writes_a_raw_file_through_provenance():
    scripts = _benchmark_scripts()
    assert len(scripts) >= 15, [path.name for path in scripts]
    missing = []
    for path in scripts:
        calls = _calls(ast.parse(path.read_text(), filename=str(path)))
        # write_raw, or raw_record for a script that writes its partial file itself; scripts that
        # drive another benchmark (the shell wrappers, ab_restructure's rounds) call it through it.
        if not calls & {"write_raw", "raw_record"}:
            missing.append(path.relative_to(REPO).as_posix())
    assert missing == [], f"benchmarks without a raw provenance file: {missing}"
    for name in NOT_BENCHMARKS:
        assert (BENCH / name).exists() or (BENCH / "gpu" / name).exists(), (
            f"{name} is listed as exempt but does not exist"
        )


def test_every_benchmark_imports_provenance_before_it_measures():
    """provenance takes the start time and load average when it is imported: a script that
    imports it only to write its file records the end of the run as its start (issue 29)."""
    late = []
    for path in _benchmark_scripts():
        tree = ast.parse(path.read_text(), filename=str(path))
        for node in ast.walk(tree):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                for inner in ast.walk(node):
                    if isinstance(inner, ast.ImportFrom) and inner.module == "provenance":
                        late.append(f"{path.relative_to(REPO).as_posix()}:{inner.lineno}")
    assert late == [], f"provenance imported inside a function (its start is the end): {late}"


def test_write_raw_records_commit_command_machine_versions_and_every_figure(tmp_path):
    figures = {"seconds": [1.5, 1.25, 1.75], "nested": {"ok": True}}
    path = provenance.write_raw(
        "unit_check",
        figures,
        command=["python", "bench/unit_check.py", "--runs", "3"],
        notes="a test",
        directory=tmp_path,
    )
    assert path.parent == tmp_path
    assert re.fullmatch(r"unit_check_\d{4}-\d\d-\d\dT\d{6}Z_[0-9a-f]{7}(-dirty)?\.json", path.name)
    record = json.loads(path.read_text())
    assert record["schema"] == provenance.SCHEMA
    assert record["figures"] == figures
    assert record["command"] == "python bench/unit_check.py --runs 3"
    assert record["notes"] == "a test"
    head = subprocess.run(
        ["git", "-C", str(REPO), "rev-parse", "HEAD"], capture_output=True, text=True, check=True
    ).stdout.strip()
    assert record["git"]["commit"] == head
    assert isinstance(record["git"]["dirty"], bool)
    assert path.name.endswith("-dirty.json") == record["git"]["dirty"]
    assert head.startswith(path.stem.split("_")[-1].removesuffix("-dirty"))
    machine = record["machine"]
    assert machine["cores"] >= 1 and machine["memory_gib"] > 0 and machine["cpu_model"]
    assert len(machine["load_average_at_start"]) == 3
    versions = record["versions"]
    assert versions["python"].count(".") == 2
    assert versions["installed"]["Django"] and versions["installed"]["torch"]
    assert versions["requirements_pins"]["torch"] == "2.13.0"
    assert "transformers" in versions["installed"]
    assert record["date_utc"] >= record["started_utc"]
    # A second file in the same second gets its own name: nothing is overwritten.
    again = provenance.write_raw("unit_check", figures, directory=tmp_path)
    assert again != path and again.exists() and path.exists()


def test_write_raw_records_the_postgresql_server_version(tmp_path):
    from django.conf import settings

    database = settings.DATABASES["default"]
    dsn = (
        f"host={database['HOST'] or '127.0.0.1'} port={database['PORT'] or 5432} "
        f"user={database['USER']} dbname=postgres"
    )
    path = provenance.write_raw("unit_check", {}, database=dsn, directory=tmp_path)
    version = json.loads(path.read_text())["versions"]["postgresql"]
    assert re.match(r"^\d+(\.\d+)?", version), version


def test_a_headline_is_the_median_with_min_and_max_of_every_run():
    assert provenance.median_min_max([3.0, 1.0, 2.0, 10.0]) == {
        "median": 2.5,
        "min": 1.0,
        "max": 10.0,
        "runs": 4,
    }
    assert provenance.median_min_max([]) == {"median": None, "min": None, "max": None, "runs": 0}
    runs = [
        {"seconds": 12.0, "rows": 5, "ok": True, "label": "a"},
        {"seconds": 10.0, "rows": 5, "ok": True, "label": "b"},
        {"seconds": 30.0, "rows": 7, "ok": False, "label": "c"},
    ]
    summary = provenance.summarise_runs(runs)
    # Numbers only (a bool is no figure); never the best run.
    assert set(summary) == {"seconds", "rows"}
    assert summary["seconds"] == {"median": 12.0, "min": 10.0, "max": 30.0, "runs": 3}
    assert summary["rows"]["median"] == 5.0
    # A figure missing from one run is not summarised as if it were complete.
    assert "seconds" not in provenance.summarise_runs([{"seconds": 1.0}, {"other": 2.0}])


@pytest.mark.parametrize("script", ["faults.py", "ingest.py", "phase1_cpu.py"])
def test_repeated_benchmarks_take_a_runs_option_defaulting_to_three(script):
    source = (BENCH / script).read_text()
    tree = ast.parse(source)
    defaults = [
        node
        for node in ast.walk(tree)
        if isinstance(node, ast.Call)
        and getattr(node.func, "attr", "") == "add_argument"
        and node.args
        and isinstance(node.args[0], ast.Constant)
        and node.args[0].value == "--runs"
    ]
    assert len(defaults) == 1
    default = {keyword.arg: keyword.value for keyword in defaults[0].keywords}["default"]
    assert isinstance(default, ast.Constant) and default.value >= 3


def test_the_start_load_average_is_the_one_sampled_at_import_not_at_the_end(monkeypatch, tmp_path):
    """The raw file's start load is provenance's import-time sample (issue 29): a load read
    when the file is written is the end of the run, and is recorded as such."""
    monkeypatch.setattr(provenance.os, "getloadavg", lambda: (42.0, 41.0, 40.0))
    record = json.loads(provenance.write_raw("unit_check", {}, directory=tmp_path).read_text())
    assert record["machine"]["load_average_at_end"] == [42.0, 41.0, 40.0]
    assert record["machine"]["load_average_at_start"] == provenance.STARTED["load_average"]
    assert record["machine"]["load_average_at_start"] != [42.0, 41.0, 40.0]
    assert record["started_utc"] == provenance.STARTED["utc"]


def test_input_checksums_record_each_file_and_a_missing_one_stops_the_benchmark(tmp_path):
    import hashlib

    shipped = REPO / "data" / "vatex_eval" / "vid_cans_score_dict.json"
    inputs = provenance.input_checksums(vatex_eval=shipped, stand_in=None)
    assert inputs["vatex_eval"] == {
        "path": "data/vatex_eval/vid_cans_score_dict.json",
        "sha256": hashlib.sha256(shipped.read_bytes()).hexdigest(),
        "bytes": shipped.stat().st_size,
    }
    assert inputs["stand_in"] is None  # asked to do without: recorded as such
    with pytest.raises(SystemExit, match=r"missing input: .*absent\.json \(captions\)"):
        provenance.input_checksums(captions=tmp_path / "absent.json")
    path = provenance.write_raw("unit_check", {}, directory=tmp_path, inputs=inputs)
    assert json.loads(path.read_text())["inputs"] == inputs


# Files shipped under data/ that benchmarks read; a script naming one must record its checksum.
_SHIPPED_INPUTS = ("vid_cans_score_dict",)


def test_every_benchmark_reading_a_shipped_input_records_its_checksum():
    unrecorded = []
    for path in _benchmark_scripts():
        source = path.read_text()
        if not any(name in source for name in _SHIPPED_INPUTS):
            continue
        calls = _calls(ast.parse(source, filename=str(path)))
        # provenance.input_checksums, or the script's own sha256 of the file (gpu_rigel's
        # input_files, rigel_vatex_eval's "inputs")
        if "input_checksums" not in calls and "sha256" not in calls:
            unrecorded.append(path.relative_to(REPO).as_posix())
    assert unrecorded == [], (
        f"benchmarks that read a shipped input without its checksum: {unrecorded}"
    )
