"""The generic formats and the VATEX annotation format: every example of docs/import-formats.md
imports (in one realistic sequence), re-imports change nothing, and bad rows are refused with the
file, line and field while the database stays exactly as it was."""

from __future__ import annotations

import io
import json
import shutil
from datetime import timedelta
from pathlib import Path

import pytest
from django.core.management import CommandError, call_command
from django.db import IntegrityError, transaction
from django.utils import timezone

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
from annotation.questions import default_questions
from datasets_app.models import CandidateCaption, CaptioningSystem, Clip, ReferenceCaption
from datasets_app.services.imports import (
    candidates_import,
    derived_candidate_id,
    judgments_import,
    vatex_import,
    writers,
)
from tests.datasets_app.helpers import EXAMPLES, run_command, table_snapshot
from tests.factories import CampaignCandidateFactory, CampaignFactory, WorkerFactory

pytestmark = pytest.mark.django_db


def _refused(command: str, path: Path, *extra: str) -> tuple[str, dict]:
    out = io.StringIO()
    with pytest.raises(CommandError) as caught:
        call_command(command, str(path), *extra, "--json", stdout=out, stderr=io.StringIO())
    payload = json.loads(out.getvalue())
    assert payload["ok"] is False
    assert payload["file"] == str(path)
    assert str(caught.value) == payload["error"]
    return str(caught.value), payload


def _created(result: dict) -> dict:
    return {table: n for table, n in result["created"].items() if n}


def test_every_documented_example_imports_and_a_second_pass_changes_nothing():
    steps = [
        ("import_vatex", EXAMPLES / "vatex.json"),
        ("import_candidates", EXAMPLES / "candidates.jsonl"),
        ("import_candidates", EXAMPLES / "candidates.csv"),
        ("import_judgments", EXAMPLES / "judgments.jsonl", "--campaign", "example-crowd"),
        ("import_judgments", EXAMPLES / "judgments.csv", "--campaign", "example-overall"),
        ("import_vatex_eval", EXAMPLES / "vatex_eval.json"),
    ]
    results = [run_command(command, str(path), *extra) for command, path, *extra in steps]

    assert [_created(result) for result in results] == [
        {"clips": 2, "references": 6},
        {"clips": 1, "references": 2, "systems": 3, "candidates": 5},
        {"clips": 1, "references": 1, "candidates": 4},
        {
            "campaigns": 1,
            "workers": 3,
            "participations": 3,
            "campaign_candidates": 3,
            "campaign_clips": 2,
            "judgments": 5,
        },
        {
            "campaigns": 1,
            "workers": 3,
            "participations": 3,
            "campaign_candidates": 3,
            "campaign_clips": 2,
            "judgments": 5,
        },
        {
            "campaigns": 1,
            "clips": 2,
            "references": 4,
            "systems": 1,
            "candidates": 4,
            "workers": 3,
            "participations": 3,
            "campaign_candidates": 4,
            "campaign_clips": 2,
            "judgments": 12,
        },
    ]
    # What the later files repeated was recognised, not duplicated.
    assert results[1]["skipped"]["clips"] == 1 and results[1]["skipped"]["references"] == 2
    assert results[2]["skipped"]["references"] == 2 and results[2]["skipped"]["systems"] == 2

    # Clips: ids split from the right, or an explicit source and window.
    assert Clip.objects.get(vatex_id="Kp0-x_aa9Zw_000030_000040").youtube_id == "Kp0-x_aa9Zw"
    lab = Clip.objects.get(vatex_id="lab-clip-0001")
    assert (lab.youtube_id, lab.start_seconds, lab.end_seconds) == ("lab-recording-17", 3.5, 9.5)
    coffee = Clip.objects.get(vatex_id="lab-clip-0002")
    assert (coffee.start_seconds, coffee.end_seconds) == (12.0, 18.25)
    assert list(
        ReferenceCaption.objects.filter(clip__vatex_id="Xq3_9dKpLw0_000012_000022").values_list(
            "text", flat=True
        )
    ) == [
        "A man in a red jacket is shovelling snow off a driveway.",
        "A person clears snow from the path in front of a house.",
        "Someone uses a shovel to move snow on a winter morning.",
    ]
    # Candidates keep their provenance; ids given or derived from clip, system and text.
    snow_a = CandidateCaption.objects.get(external_id="example:snow:captioner-a")
    assert (snow_a.system.name, snow_a.system.version) == ("captioner-a", "2.1")
    derived = derived_candidate_id(
        clip_id="Xq3_9dKpLw0_000012_000022",
        system="captioner-c",
        version="0.9",
        text="A man clears the snow with a shovel in front of his house.",
    )
    assert CandidateCaption.objects.get(external_id=derived).system.version == "0.9"
    tea = derived_candidate_id(
        clip_id="lab-clip-0002", system="captioner-b", version="", text="Someone is drinking tea."
    )
    assert CandidateCaption.objects.get(external_id=tea).position == 1
    assert CandidateCaption.objects.get(external_id="example:ball:captioner-b").text == (
        "Children are playing, running after a ball."
    )

    # The judgments' campaign was created from the file: its questions are the file's columns.
    crowd = Campaign.objects.get(slug="example-crowd")
    assert crowd.question_keys == ["descriptiveness", "relevance", "fluency"]
    assert crowd.is_imported and crowd.status == CampaignStatus.CLOSED
    assert crowd.overall_question_key == ""
    assert crowd.judgments_per_candidate == 2
    assert [level["value"] for level in crowd.questions[0]["levels"]] == [5, 4, 3, 2, 1]
    overall = Campaign.objects.get(slug="example-overall")
    assert (overall.question_keys, overall.overall_question_key) == (["overall"], "overall")
    assert overall.judgments_per_candidate == 3
    assert sorted(
        Worker.objects.filter(participations__campaign=crowd).values_list("platform", "external_id")
    ) == [(Platform.IMPORTED, f"example-crowd:ann-0{n}") for n in (1, 2, 3)]
    items = {
        item.candidate.external_id: (item.quota, item.slots_taken)
        for item in CampaignCandidate.objects.filter(campaign__in=[crowd, overall])
    }
    assert items == {
        "example:snow:captioner-a": (2, 2),
        "example:snow:captioner-b": (2, 1),
        "example:cat:captioner-b": (2, 2),
        "example:ball:captioner-a": (3, 3),
        "example:ball:captioner-b": (3, 1),
        "example:coffee:captioner-a": (3, 1),
    }
    clips = {
        (row.campaign.slug, row.clip.vatex_id): (row.candidates, row.open_slots)
        for row in CampaignClip.objects.select_related("campaign", "clip")
        if row.campaign.slug != "vatex-eval"
    }
    assert clips == {
        ("example-crowd", "Xq3_9dKpLw0_000012_000022"): (2, 1),
        ("example-crowd", "lab-clip-0001"): (1, 0),
        ("example-overall", "b7Tn-42mQzE_000000_000010"): (2, 2),
        ("example-overall", "lab-clip-0002"): (1, 2),
    }
    judgment = Judgment.objects.get(
        campaign=crowd,
        campaign_candidate__candidate__external_id="example:snow:captioner-b",
    )
    assert judgment.values == {"descriptiveness": 2, "relevance": 3, "fluency": 5}
    assert (judgment.server_ms, judgment.reason) == (11020, "Says nothing about the shovelling.")
    assert judgment.source == JudgmentSource.IMPORTED
    assert judgment.import_batch_id == results[3]["batch_id"]
    assert (
        Judgment.objects.get(
            campaign=overall,
            participation__worker__external_id="example-overall:ann-01",
            campaign_candidate__candidate__external_id="example:ball:captioner-b",
        ).reason
        == "Vague, but correct."
    )

    before = table_snapshot()
    again = [run_command(command, str(path), *extra) for command, path, *extra in steps]
    assert [result["already_imported"] for result in again] == [True] * 6
    assert [result["batch_id"] for result in again] == [result["batch_id"] for result in results]
    assert table_snapshot() == before


def test_judgments_join_an_existing_campaign_and_keep_its_counters_consistent(tmp_path):
    candidates_import(path=EXAMPLES / "candidates.jsonl")
    campaign = CampaignFactory(
        slug="crowd", questions=default_questions(), judgments_per_candidate=3
    )
    # Two crowd slots are already taken on one candidate (e.g. live assignments).
    busy = CampaignCandidateFactory(
        campaign=campaign,
        candidate=CandidateCaption.objects.get(external_id="example:snow:captioner-a"),
        quota=3,
        slots_taken=2,
    )
    result = run_command(
        "import_judgments", str(EXAMPLES / "judgments.jsonl"), "--campaign", "crowd"
    )
    assert result["campaign_created"] is False
    assert _created(result) == {
        "workers": 3,
        "participations": 3,
        "campaign_candidates": 2,
        "campaign_clips": 2,
        "judgments": 5,
    }
    busy.refresh_from_db()
    # 2 taken + 2 imported: the quota grows to what exists, so slots_taken <= quota holds.
    assert (busy.quota, busy.slots_taken) == (4, 4)
    assert set(
        CampaignCandidate.objects.filter(campaign=campaign)
        .exclude(pk=busy.pk)
        .values_list("quota", "slots_taken")
    ) == {(3, 1), (3, 2)}
    assert dict(
        CampaignClip.objects.filter(campaign=campaign).values_list("clip__vatex_id", "open_slots")
    ) == {"Xq3_9dKpLw0_000012_000022": 2, "lab-clip-0001": 1}


@pytest.fixture
def examples_loaded():
    vatex_import(path=EXAMPLES / "vatex.json")
    candidates_import(path=EXAMPLES / "candidates.jsonl")
    candidates_import(path=EXAMPLES / "candidates.csv")
    judgments_import(path=EXAMPLES / "judgments.jsonl", campaign_slug="example-crowd")
    return table_snapshot()


def _write(tmp_path: Path, name: str, text: str | bytes) -> Path:
    path = tmp_path / name
    if isinstance(text, bytes):
        path.write_bytes(text)
    else:
        path.write_text(text, encoding="utf-8")
    return path


def _jsonl(*rows: dict) -> str:
    return "".join(json.dumps(row) + "\n" for row in rows)


GOOD_JUDGMENT = {
    "rater_id": "ann-09",
    "candidate_id": "example:cat:captioner-a",
    "values": {"descriptiveness": 4, "relevance": 4, "fluency": 4},
}


@pytest.mark.parametrize(
    ("rows", "line", "field", "needle"),
    [
        (
            [GOOD_JUDGMENT, {**GOOD_JUDGMENT, "candidate_id": "no:such:candidate"}],
            2,
            "candidate_id",
            "unknown candidate id 'no:such:candidate'",
        ),
        (
            [
                {**GOOD_JUDGMENT, "candidate_id": "example:snow:captioner-b"},
                GOOD_JUDGMENT,
                {**GOOD_JUDGMENT, "values": {"descriptiveness": 4, "relevance": 6, "fluency": 4}},
            ],
            3,
            "values.relevance",
            "the rating 6 is outside 1–5",
        ),
        (
            [
                GOOD_JUDGMENT,
                {**GOOD_JUDGMENT, "values": {"descriptiveness": 1, "relevance": 1, "fluency": 1}},
            ],
            2,
            "rater_id",
            "duplicate rater for a candidate",
        ),
        (
            [{**GOOD_JUDGMENT, "values": {"descriptiveness": 4, "relevance": 4}}],
            1,
            "values.fluency",
            "the rating is missing",
        ),
        (
            [{**GOOD_JUDGMENT, "values": {**GOOD_JUDGMENT["values"], "overall": 3}}],
            1,
            "values.overall",
            "unknown question",
        ),
        ([{**GOOD_JUDGMENT, "rater_id": "ann 09"}], 1, "rater_id", "is not a valid rater id"),
        (
            [{**GOOD_JUDGMENT, "response_time_ms": -5}],
            1,
            "response_time_ms",
            "not a valid response time",
        ),
        ([{**GOOD_JUDGMENT, "candidate": "x"}], 1, "candidate", "unknown field"),
        (
            [{key: value for key, value in GOOD_JUDGMENT.items() if key != "values"}],
            1,
            "values",
            "the field is missing",
        ),
        (
            [
                {**GOOD_JUDGMENT, "rater_id": "ann-01", "candidate_id": "example:snow:captioner-a"},
            ],
            1,
            "rater_id",
            "already has a judgment of the candidate 'example:snow:captioner-a' in the campaign "
            "'example-crowd' with different ratings",
        ),
    ],
)
def test_bad_judgment_rows_are_refused(tmp_path, examples_loaded, rows, line, field, needle):
    path = _write(tmp_path, "judgments.jsonl", _jsonl(*rows))
    message, payload = _refused("import_judgments", path, "--campaign", "example-crowd")
    assert (payload["line"], payload["field"]) == (line, field)
    assert needle in message
    assert table_snapshot() == examples_loaded


def test_judgment_csv_refusals_name_header_columns_and_bad_bytes(tmp_path, examples_loaded):
    path = _write(tmp_path, "j.csv", "rater_id,candidate_id,descriptiveness,relevance,fluncy\n")
    message, payload = _refused("import_judgments", path, "--campaign", "example-crowd")
    assert (payload["line"], payload["field"]) == (1, "fluncy")
    assert "unknown question" in message

    good = "rater_id,candidate_id,descriptiveness,relevance,fluency,reason\n"
    row = "ann-09,example:cat:captioner-a,4,4,4,"
    raw = (good + row + "ok\n" + "ann-10,example:cat:captioner-a,4,4,4,").encode() + b"caf\xe9\n"
    message, payload = _refused(
        "import_judgments", _write(tmp_path, "k.csv", raw), "--campaign", "example-crowd"
    )
    assert (payload["line"], payload["field"]) == (3, "reason")
    assert "not valid UTF-8" in message

    message, payload = _refused(
        "import_judgments",
        _write(tmp_path, "l.csv", good + row + "\n" + "ann-10,x,4\n"),
        "--campaign",
        "example-crowd",
    )
    assert (payload["line"], payload["field"]) == (3, None)
    assert "the row has 3 fields, the header has 6" in message
    assert table_snapshot() == examples_loaded


def test_a_new_campaign_needs_consistent_questions_and_a_valid_slug(tmp_path, examples_loaded):
    rows = [
        {**GOOD_JUDGMENT, "values": {"overall": 4}},
        {**GOOD_JUDGMENT, "rater_id": "ann-10", "values": {"overall": 4, "fluency": 2}},
    ]
    message, payload = _refused(
        "import_judgments", _write(tmp_path, "j.jsonl", _jsonl(*rows)), "--campaign", "fresh"
    )
    assert (payload["line"], payload["field"]) == (2, "values.fluency")
    assert "unknown question; the campaign's questions are overall" in message

    message, payload = _refused(
        "import_judgments",
        _write(tmp_path, "k.jsonl", _jsonl(GOOD_JUDGMENT)),
        "--campaign",
        "Bad Slug!",
    )
    assert "is not a campaign slug" in message
    assert not Campaign.objects.filter(slug="fresh").exists()
    assert table_snapshot() == examples_loaded


CANDIDATE_CSV_HEADER = "clip_id,role,text,system,system_version,candidate_id,youtube_id,start,end\n"


@pytest.mark.parametrize(
    ("name", "text", "line", "field", "needle"),
    [
        (
            "unknown-clip.jsonl",
            _jsonl(
                {"clip_id": "lab-clip-0001", "references": []},
                {"clip_id": "lab-clip-9999", "candidates": [{"text": "x", "system": "s"}]},
            ),
            2,
            "clip_id",
            "unknown clip 'lab-clip-9999'",
        ),
        ("bad-id.jsonl", _jsonl({"clip_id": "bad id!"}), 1, "clip_id", "is not a valid clip id"),
        (
            "window.jsonl",
            _jsonl({"clip_id": "Xq3_9dKpLw0_000012_000022", "start": 11}),
            1,
            "start",
            "differs from the clip id",
        ),
        (
            "partial.jsonl",
            _jsonl({"clip_id": "lab-clip-0003", "youtube_id": "rec-1", "start": 1}),
            1,
            "end",
            "youtube_id, start and end go together",
        ),
        (
            "backwards.jsonl",
            _jsonl({"clip_id": "lab-clip-0003", "youtube_id": "rec-1", "start": 5, "end": 5}),
            1,
            "end",
            "is not after the start",
        ),
        (
            "typo.jsonl",
            _jsonl({"clip_id": "lab-clip-0001", "referenes": []}),
            1,
            "referenes",
            "unknown field",
        ),
        (
            "no-system.jsonl",
            _jsonl({"clip_id": "lab-clip-0001", "candidates": [{"text": "a cat"}]}),
            1,
            "candidates[0].system",
            "the captioning system is required",
        ),
        (
            "changed-ref.jsonl",
            _jsonl(
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
            _jsonl(
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
            _jsonl(
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
def test_bad_candidate_rows_are_refused(tmp_path, examples_loaded, name, text, line, field, needle):
    path = _write(tmp_path, name, text)
    message, payload = _refused("import_candidates", path)
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
    message, payload = _refused("import_candidates", _write(tmp_path, "c.csv", text))
    assert (payload["line"], payload["field"]) == (4, "text")
    assert "already has a different reference at position 1" in message
    assert table_snapshot() == examples_loaded


def test_the_format_comes_from_the_extension_or_the_option(tmp_path):
    path = tmp_path / "candidates.txt"
    shutil.copy(EXAMPLES / "candidates.csv", path)
    message, _ = _refused("import_candidates", path)
    assert "cannot tell the format from the extension '.txt'" in message
    assert not Clip.objects.exists()
    result = run_command("import_candidates", str(path), "--format", "csv")
    assert _created(result) == {"clips": 2, "references": 3, "systems": 2, "candidates": 4}


def test_vatex_errors_name_the_line_of_the_entry(tmp_path):
    text = (EXAMPLES / "vatex.json").read_text(encoding="utf-8")
    broken = text.replace('"A boy kicks a ball to a girl on the grass.",', "42,", 1)
    message, payload = _refused("import_vatex", _write(tmp_path, "v.json", broken))
    assert (payload["line"], payload["column"], payload["field"]) == (11, 3, "enCap[1]")
    assert "expected a text, got a number" in message

    missing = text.replace('"videoID": "b7Tn-42mQzE_000000_000010",', "", 1)
    message, payload = _refused("import_vatex", _write(tmp_path, "w.json", missing))
    assert (payload["line"], payload["field"]) == (11, "videoID")
    assert "the field is missing" in message

    assert not Clip.objects.exists()
    assert not CaptioningSystem.objects.exists()


TRICKY_TEXTS = [
    "a\ttab",
    "a\nnewline",
    "a\rcarriage return",
    "a \\ backslash",
    'a "double" quote',
    "a, comma",
    "\\N",
    "",
    "café — 日本",
    "\\.",
    "a\n\\.\nb",
    'all: \t\n\r\\ " , \\N',
]


def test_rows_insert_stores_every_value_exactly(monkeypatch):
    """Texts with COPY's and CSV's special characters, an empty text beside a NULL, JSON with nested
    quotes, datetimes, and the field defaults (boolean, datetime, JSON) read back as given, in
    several COPY pages, each reported."""
    monkeypatch.setattr(writers, "BULK_BATCH_SIZE", 5)
    item = CampaignCandidateFactory()
    campaign = item.campaign
    workers = WorkerFactory.create_batch(len(TRICKY_TEXTS) + 1)
    tokens = [*TRICKY_TEXTS, None]
    consented = [timezone.now() - timedelta(microseconds=n) for n in range(len(TRICKY_TEXTS))]
    consented.append(None)
    platform_data = [
        {"study": f'say "{text}"', "nested": {'"k"': ['\\"', text]}} for text in tokens
    ]
    reported: list[tuple[str, int, int]] = []
    before = timezone.now()

    writers.rows_insert(
        Participation,
        [
            {
                "campaign_id": campaign.pk,
                "worker_id": worker.pk,
                "token_hash": token,
                "platform_data": data,
                "consented_at": when,
            }
            for worker, token, data, when in zip(
                workers, tokens, platform_data, consented, strict=True
            )
        ],
        stage="participations",
        progress=lambda stage, done, total: reported.append((stage, done, total)),
    )
    participations = list(Participation.objects.filter(campaign=campaign).order_by("pk"))
    assert [p.worker_id for p in participations] == [worker.pk for worker in workers]
    assert [p.token_hash for p in participations] == tokens
    assert Participation.objects.filter(token_hash__isnull=True).count() == 1
    assert Participation.objects.filter(token_hash="").count() == 1
    assert [p.platform_data for p in participations] == platform_data
    assert [p.consented_at for p in participations] == consented
    assert reported == [("participations", done, len(tokens)) for done in (0, 5, 10, 13)]

    values = {"overall": 4, "note": 'he said "no, \\"never\\""', "list": [None, True, 1.5]}
    server_ms = [None, *range(len(TRICKY_TEXTS))]
    writers.rows_insert(
        Judgment,
        [
            {
                "campaign_id": campaign.pk,
                "campaign_candidate_id": item.pk,
                "participation_id": participation.pk,
                "values": values,
                "reason": text,
                "source": JudgmentSource.IMPORTED,
                "server_ms": ms,
            }
            for participation, text, ms in zip(
                participations, [*TRICKY_TEXTS, "last"], server_ms, strict=True
            )
        ],
        stage="judgments",
        progress=None,
    )
    after = timezone.now()
    judgments = list(Judgment.objects.filter(campaign=campaign).order_by("pk"))
    assert [j.participation_id for j in judgments] == [p.pk for p in participations]
    assert [j.reason for j in judgments] == [*TRICKY_TEXTS, "last"]
    assert [j.server_ms for j in judgments] == server_ms
    assert all(j.values == values for j in judgments)
    assert {j.source for j in judgments} == {JudgmentSource.IMPORTED}
    # The defaults: one value per column, as the field gives it.
    assert all(j.is_excluded is False for j in judgments)
    assert {(j.excluded_by, j.exclusion_reason) for j in judgments} == {("", "")}
    assert {(j.assignment_id, j.excluded_at, j.client_active_ms) for j in judgments} == {
        (None, None, None)
    }
    assert all(j.exclusion_detail == {} for j in judgments)
    created = {j.created_at for j in judgments}
    assert len(created) == 1
    assert before <= created.pop() <= after
    joined = {p.joined_at for p in participations}
    assert len(joined) == 1
    assert before <= joined.pop() <= after

    # The database still checks what COPY loads: a second empty token breaks the unique constraint.
    with pytest.raises(IntegrityError), transaction.atomic():
        writers.rows_insert(
            Participation,
            [{"campaign_id": campaign.pk, "worker_id": WorkerFactory().pk, "token_hash": ""}],
            stage="participations",
            progress=None,
        )
