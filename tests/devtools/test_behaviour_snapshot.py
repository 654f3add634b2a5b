"""`devtools/behaviour_snapshot.py --compare`: two snapshot folders are equal only when every
compared file is byte-identical; meta.json (commit, time) is left out."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from devtools.behaviour_snapshot import main, normalised_stderr, normalised_stdout


def _snapshot(root: Path, *, stats: dict[str, int], commit: str) -> Path:
    (root / "commands").mkdir(parents=True)
    (root / "release").mkdir()
    (root / "coverage.json").write_text('{"stats": {"steps": ["stats"]}}\n')
    (root / "commands/01-stats.out").write_text(json.dumps(stats, sort_keys=True))
    (root / "release/files.json").write_text('{"releases/1/manifest.json": "ab12"}\n')
    (root / "meta.json").write_text(json.dumps({"commit": commit}))
    return root


def test_identical_snapshots_compare_equal_whatever_their_meta(tmp_path, capsys):
    first = _snapshot(tmp_path / "a", stats={"clips": 3000}, commit="6c7144e")
    second = _snapshot(tmp_path / "b", stats={"clips": 3000}, commit="0123abc")

    assert main(["--compare", str(first), str(second)]) == 0
    assert capsys.readouterr().out.strip() == "identical"


def test_a_changed_output_is_printed_and_fails_the_comparison(tmp_path, capsys):
    first = _snapshot(tmp_path / "a", stats={"clips": 3000}, commit="6c7144e")
    second = _snapshot(tmp_path / "b", stats={"clips": 2999}, commit="6c7144e")

    assert main(["--compare", str(first), str(second)]) == 1
    out = capsys.readouterr().out
    assert "differs: commands/01-stats.out" in out
    assert '-{"clips": 3000}' in out
    assert '+{"clips": 2999}' in out
    assert out.strip().endswith("1 differing file(s)")


def test_a_file_missing_on_either_side_fails_the_comparison(tmp_path, capsys):
    first = _snapshot(tmp_path / "a", stats={"clips": 3000}, commit="6c7144e")
    second = tmp_path / "b"
    shutil.copytree(first, second)
    (second / "release/files.json").unlink()
    (second / "commands/02-agreement.out").write_text("{}")

    assert main(["--compare", str(first), str(second)]) == 1
    out = capsys.readouterr().out
    assert f"only in {first}: release/files.json" in out
    assert f"only in {second}: commands/02-agreement.out" in out
    assert "2 differing file(s)" in out


def test_a_folder_that_is_not_a_snapshot_is_refused(tmp_path):
    first = _snapshot(tmp_path / "a", stats={"clips": 3000}, commit="6c7144e")
    (tmp_path / "empty").mkdir()

    with pytest.raises(SystemExit) as exited:
        main(["--compare", str(first), str(tmp_path / "empty")])
    assert exited.value.code == 2


def test_only_durations_and_log_records_are_normalised():
    stdout, parsed = normalised_stdout(
        '{"batch_id": 1, "questions": {"overall": {"seconds": 0.879, "iterations": 25}}, '
        '"seconds": 6.731}'
    )
    assert parsed == {
        "batch_id": 1,
        "questions": {"overall": {"seconds": "<seconds>", "iterations": 25}},
        "seconds": "<seconds>",
    }
    assert stdout.endswith('"iterations": 25}}, "seconds": "<seconds>"}')
    assert normalised_stdout("Imported 3 clips.") == ("Imported 3 clips.", None)
    assert normalised_stderr(
        "QC run of vatex-eval…\n"
        "2026-11-27 23:41:11,198 INFO export.builder release 1: selection in 0.26 s\n"
        "CommandError: no campaign with slug 'x'"
    ) == ["QC run of vatex-eval…", "CommandError: no campaign with slug 'x'"]
