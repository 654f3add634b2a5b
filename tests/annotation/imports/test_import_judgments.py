"""The generic judgments format: every example of docs/import-formats.md imports (in one
realistic sequence with the candidates it refers to), re-imports change nothing, judgments join
existing campaigns with consistent counters, and bad rows are refused with the file, line and field
while the database stays exactly as it was."""

from __future__ import annotations

import pytest

from annotation.models import (
    Campaign,
    CampaignCandidate,
    CampaignClip,
    CampaignStatus,
    Judgment,
    JudgmentSource,
    Platform,
    Worker,
)
from annotation.questions import default_questions
from datasets_app.models import CandidateCaption, Clip, ReferenceCaption
from datasets_app.services.imports import candidates_import, derived_candidate_id
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
from tests.factories import CampaignCandidateFactory, CampaignFactory

pytestmark = pytest.mark.django_db


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

    assert [created_counts(result) for result in results] == [
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
    assert created_counts(result) == {
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
    return load_examples()


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
def test_bad_judgment_rows_arerefused(tmp_path, examples_loaded, rows, line, field, needle):
    path = write_file(tmp_path, "judgments.jsonl", jsonl(*rows))
    message, payload = refused("import_judgments", path, "--campaign", "example-crowd")
    assert (payload["line"], payload["field"]) == (line, field)
    assert needle in message
    assert table_snapshot() == examples_loaded


def test_judgment_csv_refusals_name_header_columns_and_bad_bytes(tmp_path, examples_loaded):
    path = write_file(tmp_path, "j.csv", "rater_id,candidate_id,descriptiveness,relevance,fluncy\n")
    message, payload = refused("import_judgments", path, "--campaign", "example-crowd")
    assert (payload["line"], payload["field"]) == (1, "fluncy")
    assert "unknown question" in message

    good = "rater_id,candidate_id,descriptiveness,relevance,fluency,reason\n"
    row = "ann-09,example:cat:captioner-a,4,4,4,"
    raw = (good + row + "ok\n" + "ann-10,example:cat:captioner-a,4,4,4,").encode() + b"caf\xe9\n"
    message, payload = refused(
        "import_judgments", write_file(tmp_path, "k.csv", raw), "--campaign", "example-crowd"
    )
    assert (payload["line"], payload["field"]) == (3, "reason")
    assert "not valid UTF-8" in message

    message, payload = refused(
        "import_judgments",
        write_file(tmp_path, "l.csv", good + row + "\n" + "ann-10,x,4\n"),
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
    message, payload = refused(
        "import_judgments", write_file(tmp_path, "j.jsonl", jsonl(*rows)), "--campaign", "fresh"
    )
    assert (payload["line"], payload["field"]) == (2, "values.fluency")
    assert "unknown question; the campaign's questions are overall" in message

    message, payload = refused(
        "import_judgments",
        write_file(tmp_path, "k.jsonl", jsonl(GOOD_JUDGMENT)),
        "--campaign",
        "Bad Slug!",
    )
    assert "is not a campaign slug" in message
    assert not Campaign.objects.filter(slug="fresh").exists()
    assert table_snapshot() == examples_loaded
