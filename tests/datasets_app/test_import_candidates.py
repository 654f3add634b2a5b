"""The generic candidates format and the VATEX annotation format: bad rows are refused with the
file, line and field while the database stays exactly as it was; the format comes from the
extension or the option. (The documented examples are imported end to end, judgments included, by
tests/annotation/imports/test_import_judgments.py.)"""

from __future__ import annotations

import shutil

import pytest

from datasets_app.models import CaptioningSystem, Clip
from tests.datasets_app.helpers import (
    EXAMPLES,
    created_counts,
    jsonl,
    load_examples,
    refused,
    run_command,
    table_snapshot,
    write_file,
)

pytestmark = pytest.mark.django_db

CANDIDATE_CSV_HEADER = "clip_id,role,text,system,system_version,candidate_id,youtube_id,start,end\n"


@pytest.fixture
def examples_loaded():
    return load_examples()


@pytest.mark.parametrize(
    ("name", "text", "line", "field", "needle"),
    [
        (
            "unknown-clip.jsonl",
            jsonl(
                {"clip_id": "lab-clip-0001", "references": []},
                {"clip_id": "lab-clip-9999", "candidates": [{"text": "x", "system": "s"}]},
            ),
            2,
            "clip_id",
            "unknown clip 'lab-clip-9999'",
        ),
        ("bad-id.jsonl", jsonl({"clip_id": "bad id!"}), 1, "clip_id", "is not a valid clip id"),
        (
            "window.jsonl",
            jsonl({"clip_id": "Xq3_9dKpLw0_000012_000022", "start": 11}),
            1,
            "start",
            "differs from the clip id",
        ),
        (
            "partial.jsonl",
            jsonl({"clip_id": "lab-clip-0003", "youtube_id": "rec-1", "start": 1}),
            1,
            "end",
            "youtube_id, start and end go together",
        ),
        (
            "backwards.jsonl",
            jsonl({"clip_id": "lab-clip-0003", "youtube_id": "rec-1", "start": 5, "end": 5}),
            1,
            "end",
            "is not after the start",
        ),
        (
            "typo.jsonl",
            jsonl({"clip_id": "lab-clip-0001", "referenes": []}),
            1,
            "referenes",
            "unknown field",
        ),
        (
            "no-system.jsonl",
            jsonl({"clip_id": "lab-clip-0001", "candidates": [{"text": "a cat"}]}),
            1,
            "candidates[0].system",
            "the captioning system is required",
        ),
        (
            "changed-ref.jsonl",
            jsonl(
                {
                    "clip_id": "lab-clip-0001",
                    "references": ["A cat jumps onto a kitchen counter.", "Something else."],
                }
            ),
            1,
            "references[1]",
            "already has a different reference at position 1",
        ),
        (
            "changed-candidate.jsonl",
            jsonl(
                {
                    "clip_id": "lab-clip-0001",
                    "candidates": [
                        {"id": "example:cat:captioner-b", "text": "A dog.", "system": "captioner-b"}
                    ],
                }
            ),
            1,
            "candidates[0].id",
            "already stored with a different text",
        ),
        (
            "dup.jsonl",
            jsonl(
                {
                    "clip_id": "lab-clip-0001",
                    "candidates": [
                        {"id": "n:1", "text": "a", "system": "s"},
                        {"id": "n:1", "text": "b", "system": "s"},
                    ],
                }
            ),
            1,
            "candidates[1].id",
            "appears twice",
        ),
        (
            "role.csv",
            CANDIDATE_CSV_HEADER
            + "lab-clip-0001,reference,A cat.,,,,,,\nlab-clip-0001,caption,A cat.,s,,,,,\n",
            3,
            "role",
            "'caption' is not a role",
        ),
        (
            "ref-with-system.csv",
            CANDIDATE_CSV_HEADER + "lab-clip-0001,reference,A cat.,s,,,,,\n",
            2,
            "system",
            "must be empty on a reference row",
        ),
        ("column.csv", "clip_id,role,text,colour\n", 1, "colour", "unknown column"),
        (
            "missing-column.csv",
            "clip_id,text\n",
            1,
            "role",
            "the required column 'role' is missing",
        ),
        (
            "unknown-clip.csv",
            CANDIDATE_CSV_HEADER + "lab-clip-0042,reference,A new clip.,,,,,,\n",
            2,
            "clip_id",
            "unknown clip 'lab-clip-0042'",
        ),
    ],
)
def test_bad_candidate_rows_arerefused(tmp_path, examples_loaded, name, text, line, field, needle):
    path = write_file(tmp_path, name, text)
    message, payload = refused("import_candidates", path)
    assert (payload["line"], payload["field"]) == (line, field)
    assert needle in message
    assert table_snapshot() == examples_loaded


def test_a_changed_reference_in_a_csv_names_its_own_row(tmp_path, examples_loaded):
    text = (
        CANDIDATE_CSV_HEADER
        + "Xq3_9dKpLw0_000012_000022,reference,A man in a red jacket is shovelling snow off a driveway.,,,,,,\n"
        + "Xq3_9dKpLw0_000012_000022,candidate,A new caption.,captioner-z,,,,,\n"
        + "Xq3_9dKpLw0_000012_000022,reference,Not what is stored.,,,,,,\n"
    )
    message, payload = refused("import_candidates", write_file(tmp_path, "c.csv", text))
    assert (payload["line"], payload["field"]) == (4, "text")
    assert "already has a different reference at position 1" in message
    assert table_snapshot() == examples_loaded


def test_the_format_comes_from_the_extension_or_the_option(tmp_path):
    path = tmp_path / "candidates.txt"
    shutil.copy(EXAMPLES / "candidates.csv", path)
    message, _ = refused("import_candidates", path)
    assert "cannot tell the format from the extension '.txt'" in message
    assert not Clip.objects.exists()
    result = run_command("import_candidates", str(path), "--format", "csv")
    assert created_counts(result) == {"clips": 2, "references": 3, "systems": 2, "candidates": 4}


def test_vatex_errors_name_the_line_of_the_entry(tmp_path):
    text = (EXAMPLES / "vatex.json").read_text(encoding="utf-8")
    broken = text.replace('"A boy kicks a ball to a girl on the grass.",', "42,", 1)
    message, payload = refused("import_vatex", write_file(tmp_path, "v.json", broken))
    assert (payload["line"], payload["column"], payload["field"]) == (11, 3, "enCap[1]")
    assert "expected a text, got a number" in message

    missing = text.replace('"videoID": "b7Tn-42mQzE_000000_000010",', "", 1)
    message, payload = refused("import_vatex", write_file(tmp_path, "w.json", missing))
    assert (payload["line"], payload["field"]) == (11, "videoID")
    assert "the field is missing" in message

    assert not Clip.objects.exists()
    assert not CaptioningSystem.objects.exists()
