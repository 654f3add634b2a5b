"""The VATEX-EVAL importer: exact counts on the real file, idempotency, and refusals that name the
file, line and field while leaving the database exactly as it was."""

from __future__ import annotations

import io
import json
from collections import Counter

import pytest
from django.core.management import CommandError, call_command

from annotation.imports import vatex_eval_import
from annotation.models import (
    Campaign,
    CampaignCandidate,
    CampaignClip,
    CampaignStatus,
    Judgment,
    JudgmentSource,
    Participation,
    Platform,
    Worker,
)
from datasets_app.models import (
    CandidateCaption,
    CaptioningSystem,
    Clip,
    ImportBatch,
    ImportKind,
    ReferenceCaption,
)
from datasets_app.services.imports import ImportRejected
from tests.datasets_app.helpers import (
    VATEX_EVAL_PATH,
    run_command,
    table_snapshot,
    vatex_eval_entries,
    write_vatex_eval,
)
from tests.factories import CampaignFactory

pytestmark = pytest.mark.django_db

SCORES = "[[5.0, 4.0, 4.0], [5.0, 2.0, 2.0], [5.0, 4.0, 4.0], [3.0, 2.0, 2.0], [4.0, 2.0, 2.0], [2.0, 2.0, 2.0]]"


@pytest.mark.slow
def test_the_full_vatex_eval_file_imports_exactly_and_a_second_import_changes_nothing():
    result = run_command("import_vatex_eval", str(VATEX_EVAL_PATH))

    assert result["ok"] is True
    assert result["already_imported"] is False
    assert result["sha256"] == "f39eadb3e23102b303b871b5355bcbe45c9661facee0d3e6a1d9cff7327ffca0"
    assert result["created"] == {
        "campaign_candidates": 18000,
        "campaign_clips": 3000,
        "campaigns": 1,
        "candidates": 18000,
        "clips": 3000,
        "judgments": 54000,
        "participations": 3,
        "references": 27000,
        "systems": 1,
        "workers": 3,
    }
    assert set(result["skipped"].values()) == {0}
    stats = run_command("stats")
    expected_stats = {
        "clips": 3000,
        "references": 27000,
        "candidates": 18000,
        "judgments": 54000,
        "campaigns": 1,
        "systems": 1,
        "workers": 3,
        "participations": 3,
        "campaign_candidates": 18000,
        "campaign_clips": 3000,
        "import_batches": 1,
        "assignments": 0,
        "judgments_by_source": {"crowd": 0, "imported": 54000},
        "judgments_excluded": 0,
        "clips_servable": 0,
    }
    assert {key: stats[key] for key in expected_stats} == expected_stats
    assert stats["clips_by_status"]["pending"] == 3000
    assert Clip.objects.count() == 3000
    assert CandidateCaption.objects.count() == 18000
    assert ReferenceCaption.objects.count() == 27000
    assert Judgment.objects.filter(source=JudgmentSource.IMPORTED).count() == 54000

    # The ratings, exactly as in the file (counted independently with json + ast earlier).
    values = Counter(
        value["overall"] for value in Judgment.objects.values_list("values", flat=True)
    )
    assert values == {1: 1766, 2: 4362, 3: 5723, 4: 20279, 5: 21870}

    campaign = Campaign.objects.get(slug="vatex-eval")
    assert campaign.is_imported is True
    assert campaign.status == CampaignStatus.CLOSED
    assert campaign.question_keys == ["overall"]
    assert [level["value"] for level in campaign.questions[0]["levels"]] == [5, 4, 3, 2, 1]
    assert campaign.judgments_per_candidate == 3
    assert sorted(Worker.objects.values_list("platform", "external_id")) == [
        (Platform.IMPORTED, "vatex-eval:slot-1"),
        (Platform.IMPORTED, "vatex-eval:slot-2"),
        (Platform.IMPORTED, "vatex-eval:slot-3"),
    ]
    assert Participation.objects.filter(campaign=campaign).count() == 3
    assert set(CampaignCandidate.objects.values_list("quota", "slots_taken", "is_control")) == {
        (3, 3, False)
    }
    assert set(CampaignClip.objects.values_list("candidates", "open_slots")) == {(6, 0)}
    system = CaptioningSystem.objects.get()
    assert (system.name, system.version) == ("vatex-eval", "unknown")

    # One clip in detail: ids split from the right, references in order, the ratings per slot.
    clip = Clip.objects.get(vatex_id="--07WQ2iBlw_000001_000011")
    assert (clip.youtube_id, clip.start_seconds, clip.end_seconds) == ("--07WQ2iBlw", 1.0, 11.0)
    references = list(clip.references.values_list("text", flat=True))
    assert len(references) == 9
    assert references[0] == "a boy throws nerf arrows after getting into a throwing position ."
    assert references[8] == "a man is playing a throwing game for distance marking ."
    candidate = CandidateCaption.objects.get(external_id="vatex-eval:--07WQ2iBlw_000001_000011:0")
    assert candidate.text == "a young man throws an item at a track and field for practice ."
    assert candidate.clip == clip
    ratings = dict(
        Judgment.objects.filter(campaign_candidate__candidate=candidate).values_list(
            "participation__worker__external_id", "values"
        )
    )
    assert ratings == {
        "vatex-eval:slot-1": {"overall": 5},
        "vatex-eval:slot-2": {"overall": 4},
        "vatex-eval:slot-3": {"overall": 4},
    }
    assert Judgment.objects.filter(server_ms__isnull=False).count() == 0
    # A YouTube id that itself contains "_" is split from the right.
    underscored = Clip.objects.filter(youtube_id__contains="_").first()
    assert underscored is not None
    assert underscored.vatex_id.startswith(underscored.youtube_id + "_")

    before = table_snapshot(light=True)
    again = run_command("import_vatex_eval", str(VATEX_EVAL_PATH))
    assert again["already_imported"] is True
    assert again["batch_id"] == result["batch_id"]
    assert set(again["created"].values()) == {0}
    assert again["skipped"] == result["created"]
    assert table_snapshot(light=True) == before
    assert run_command("stats") == stats


def test_a_limited_import_then_a_larger_one_adds_only_what_is_new(tmp_path):
    first = run_command("import_vatex_eval", str(VATEX_EVAL_PATH), "--limit", "3")
    assert first["created"]["clips"] == 3
    assert first["created"]["judgments"] == 54
    second = run_command("import_vatex_eval", str(VATEX_EVAL_PATH), "--limit", "5")
    assert second["created"]["clips"] == 2
    assert second["skipped"]["clips"] == 3
    assert second["created"]["judgments"] == 36
    assert second["skipped"]["judgments"] == 54
    assert second["created"]["campaigns"] == 0
    assert (Clip.objects.count(), Judgment.objects.count()) == (5, 90)
    assert set(CampaignCandidate.objects.values_list("quota", "slots_taken")) == {(3, 3)}
    assert set(CampaignClip.objects.values_list("candidates", "open_slots")) == {(6, 0)}
    # The same limited import again is a no-op.
    before = table_snapshot()
    assert run_command("import_vatex_eval", str(VATEX_EVAL_PATH), "--limit", "5")[
        "already_imported"
    ]
    assert table_snapshot() == before
    assert ImportBatch.objects.filter(kind=ImportKind.VATEX_EVAL).count() == 2


def test_the_same_content_in_another_file_creates_nothing_new(tmp_path):
    entries = vatex_eval_entries(4)
    first = write_vatex_eval(tmp_path / "a.json", entries)
    vatex_eval_import(path=first)
    before = table_snapshot()
    # Same clips, different bytes (reversed order): a new batch, but no new content.
    second = write_vatex_eval(tmp_path / "b.json", list(reversed(entries)))
    result = vatex_eval_import(path=second)
    assert result.already_imported is False
    assert set(result.created.values()) == {0}
    assert result.skipped["judgments"] == 72
    after = table_snapshot()
    assert after.pop("batches") == before.pop("batches") + 1
    assert after == before


def _import_error(path, *extra: str) -> tuple[str, dict]:
    out = io.StringIO()
    with pytest.raises(CommandError) as caught:
        call_command(
            "import_vatex_eval", str(path), *extra, "--json", stdout=out, stderr=io.StringIO()
        )
    return str(caught.value), json.loads(out.getvalue())


@pytest.fixture
def seeded(tmp_path):
    """A database that already holds a small import, so 'unchanged' is not trivially empty."""
    vatex_eval_import(path=write_vatex_eval(tmp_path / "seed.json", vatex_eval_entries(2)))
    return table_snapshot()


def test_a_bad_rating_on_a_late_line_leaves_the_database_exactly_as_it_was(tmp_path, seeded):
    entries = vatex_eval_entries(40, start=2)
    key, entry = entries[37]
    entry["scores"] = (
        "[[5.0, 4.0, 4.0], [5.0, 6.0, 2.0], [5.0, 4.0, 4.0], [3.0, 2.0, 2.0], [4.0, 2.0, 2.0], [2.0, 2.0, 2.0]]"
    )
    path = write_vatex_eval(tmp_path / "bad.json", entries)

    message, payload = _import_error(path)

    assert payload["ok"] is False
    assert payload["file"] == str(path)
    assert payload["line"] == 39
    assert payload["field"] == "scores[1][1]"
    assert message == payload["error"]
    assert message.startswith(f'{path}, line 39, column 1, field "scores[1][1]": clip {key!r}')
    assert "the rating 6.0 is outside 1–5" in message
    assert table_snapshot() == seeded


@pytest.mark.parametrize(
    ("mutate", "field", "needle"),
    [
        (
            lambda e: e.__setitem__("scores", SCORES.replace("4.0", "3.5", 1)),
            "scores[0][1]",
            "not a whole number",
        ),
        (
            lambda e: e.__setitem__("scores", "__import__('os').system('echo pwned')"),
            "scores",
            "not a list literal",
        ),
        (
            lambda e: e.__setitem__("scores", "[[5.0, 4.0, 4.0]]"),
            "scores",
            "1 rows of ratings for 6 candidates",
        ),
        (
            lambda e: e.__setitem__("scores", SCORES.replace("[5.0, 4.0, 4.0]", "[5.0, 4.0]", 1)),
            "scores[0]",
            "expected 3 ratings",
        ),
        (
            lambda e: e.__setitem__("scores", SCORES.replace("4.0", "True", 1)),
            "scores[0][1]",
            "expected a rating",
        ),
        (lambda e: e.pop("refs"), "refs", "the field is missing"),
        (lambda e: e["cands"].__setitem__(2, "   "), "cands[2]", "the text is empty"),
        (lambda e: e["refs"][0].__setitem__(4, 17), "refs[0][4]", "expected a text"),
        (
            lambda e: e.__setitem__("vid", "something-else_000001_000002"),
            "vid",
            "differs from the clip's key",
        ),
    ],
)
def test_malformed_entries_are_refused_with_line_and_field(tmp_path, seeded, mutate, field, needle):
    entries = vatex_eval_entries(6, start=2)
    mutate(entries[4][1])
    path = write_vatex_eval(tmp_path / "bad.json", entries)

    message, payload = _import_error(path)

    assert (payload["line"], payload["field"]) == (6, field)
    assert needle in message
    assert table_snapshot() == seeded


def test_a_malformed_clip_id_is_refused(tmp_path, seeded):
    entries = vatex_eval_entries(3, start=2)
    _key, entry = entries[1]
    entry["vid"] = "not-a-vatex-id"
    entries[1] = ("not-a-vatex-id", entry)
    message, payload = _import_error(write_vatex_eval(tmp_path / "bad.json", entries))
    assert (payload["line"], payload["field"]) == (3, "(key)")
    assert "is not a VATEX clip id" in message
    assert table_snapshot() == seeded


def test_a_window_whose_end_is_not_after_its_start_is_refused(tmp_path, seeded):
    entries = vatex_eval_entries(3, start=2)
    _key, entry = entries[2]
    broken = "abcdefghijk_000020_000010"
    entry["vid"] = broken
    entries[2] = (broken, entry)
    message, payload = _import_error(write_vatex_eval(tmp_path / "bad.json", entries))
    assert (payload["line"], payload["field"]) == (4, "(key)")
    assert "the end (10 s) is not after the start (20 s)" in message
    assert table_snapshot() == seeded


def test_non_utf8_bytes_are_refused_naming_the_field(tmp_path, seeded):
    entries = vatex_eval_entries(5, start=2)
    path = write_vatex_eval(tmp_path / "latin1.json", entries)
    target = entries[3][1]["cands"][1]
    raw = path.read_bytes().replace(
        target.encode(), target.replace(" ", " caf\xe9 ", 1).encode("latin-1"), 1
    )
    path.write_bytes(raw)
    message, payload = _import_error(path)
    assert (payload["line"], payload["field"]) == (5, "cands[1]")
    assert "not valid UTF-8" in message
    assert table_snapshot() == seeded


def test_a_value_nested_120000_deep_is_refused_naming_its_line(tmp_path, seeded):
    """Python's decoder recursed once per level: a RecursionError, not a refusal (issue 25)."""
    entries = vatex_eval_entries(3, start=2)
    path = write_vatex_eval(tmp_path / "deep.json", entries)
    lines = path.read_text().split("\n")
    lines[2] = lines[2].replace('"cands": [', '"cands": [' + "[" * 120_000 + "]" * 120_000 + ",", 1)
    path.write_text("\n".join(lines))
    message, payload = _import_error(path)
    assert (payload["line"], payload["field"]) == (3, "(JSON syntax)")
    assert "invalid JSON: nested too deeply" in message
    assert table_snapshot() == seeded


def test_invalid_json_names_line_and_column(tmp_path, seeded):
    entries = vatex_eval_entries(4, start=2)
    path = write_vatex_eval(tmp_path / "broken.json", entries)
    lines = path.read_text().split("\n")
    lines[3] = lines[3].replace('"cands": [', '"cands": [,', 1)
    path.write_text("\n".join(lines))
    message, payload = _import_error(path)
    assert payload["line"] == 4
    assert payload["field"] == "(JSON syntax)"
    assert "invalid JSON" in message
    assert table_snapshot() == seeded


def test_a_clip_listed_twice_is_refused(tmp_path, seeded):
    entries = vatex_eval_entries(3, start=2)
    path = write_vatex_eval(tmp_path / "dup.json", [*entries, entries[0]])
    message, payload = _import_error(path)
    assert payload["line"] == 5
    assert "appears twice" in message
    assert table_snapshot() == seeded


def test_an_oversize_file_is_refused_before_reading(tmp_path, seeded, settings):
    path = write_vatex_eval(tmp_path / "big.json", vatex_eval_entries(3, start=2))
    settings.LEPUS_MAX_IMPORT_BYTES = 1024
    message, payload = _import_error(path)
    assert payload["line"] is None
    assert "over the import limit of 1024 bytes" in message
    assert table_snapshot() == seeded


def test_a_missing_file_is_refused(tmp_path, seeded):
    message, payload = _import_error(tmp_path / "nope.json")
    assert payload["ok"] is False
    assert message == f"{tmp_path / 'nope.json'}: no such file"
    assert table_snapshot() == seeded


def test_changed_content_under_existing_ids_is_refused(tmp_path, seeded):
    # The seed holds the first two clips; a file repeating them with a changed caption and a
    # changed rating must not rewrite what is stored.
    entries = vatex_eval_entries(2)
    entries[1][1]["cands"][3] = "a completely different caption ."
    message, payload = _import_error(write_vatex_eval(tmp_path / "changed.json", entries))
    assert (payload["line"], payload["field"]) == (3, "cands[3]")
    assert "already stored with a different text" in message

    entries = vatex_eval_entries(2)
    entries[0][1]["scores"] = entries[0][1]["scores"].replace(
        "[5.0, 4.0, 4.0]", "[5.0, 4.0, 1.0]", 1
    )
    message, payload = _import_error(write_vatex_eval(tmp_path / "rerated.json", entries))
    assert (payload["line"], payload["field"]) == (2, "scores[0][2]")
    assert "already has a judgment" in message
    assert table_snapshot() == seeded


def test_an_unrelated_campaign_named_vatex_eval_is_not_written_into(tmp_path):
    CampaignFactory(slug="vatex-eval")
    path = write_vatex_eval(tmp_path / "a.json", vatex_eval_entries(2))
    with pytest.raises(ImportRejected) as caught:
        vatex_eval_import(path=path)
    assert "is not an imported campaign" in str(caught.value)
    assert (Clip.objects.count(), Judgment.objects.count(), ImportBatch.objects.count()) == (
        0,
        0,
        0,
    )


def test_stats_counts_every_core_table(tmp_path):
    vatex_eval_import(path=write_vatex_eval(tmp_path / "a.json", vatex_eval_entries(2)))
    stats = run_command("stats")
    assert {
        key: stats[key] for key in ("clips", "references", "candidates", "judgments", "campaigns")
    } == {
        "clips": 2,
        "references": 18,
        "candidates": 12,
        "judgments": 36,
        "campaigns": 1,
    }
    assert stats["clips_by_status"] == {
        "pending": 2,
        "queued": 0,
        "processing": 0,
        "ready": 0,
        "error": 0,
    }


def test_the_command_exits_non_zero_with_the_error_on_stderr(tmp_path, seeded):
    """The real command line: status 1, the message on stderr, one JSON object on stdout."""
    import subprocess
    import sys

    from tests.support.processes import REPO_ROOT, process_environment

    entries = vatex_eval_entries(3, start=2)
    entries[2][1]["scores"] = SCORES.replace("2.0", "0.0", 1)
    path = write_vatex_eval(tmp_path / "bad.json", entries)
    completed = subprocess.run(
        [sys.executable, "manage.py", "import_vatex_eval", str(path), "--json"],
        cwd=REPO_ROOT,
        env=process_environment(),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert completed.returncode == 1
    payload = json.loads(completed.stdout)
    assert (payload["ok"], payload["line"], payload["field"]) == (False, 4, "scores[1][1]")
    assert f"CommandError: {payload['error']}" in completed.stderr
    assert "the rating 0.0 is outside 1–5" in completed.stderr
    assert table_snapshot() == seeded
