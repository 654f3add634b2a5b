"""The campaign's rubric (annotation.questions): which words describe each question's levels.

The paper's Appendix C gives one holistic rubric for all three criteria; shown under each question
it told workers that fluency 1 means "fundamentally unrelated to the video" and that relevance 5
needs "no grammatical errors". New campaigns get per-criterion levels (our own wording); the paper's
rubric stays available, and campaigns made before the choice existed keep it."""

from __future__ import annotations

import pytest
from django.db import connection
from django.db.migrations.executor import MigrationExecutor

from annotation.crowd.services.campaigns import CampaignInvalid, campaign_create, campaign_update
from annotation.models import Campaign, Judgment
from annotation.questions import (
    PAPER_LEVELS,
    PER_CRITERION_LEVELS,
    PER_CRITERION_OTHER_LEVELS,
    Rubric,
)
from tests.annotation.crowd.test_worker_api import NEXT, submit_url, worker_client
from tests.annotation.crowd_factories import (
    all_candidate_ratings,
    clips_with_candidates,
    crowd_campaign,
    crowd_join,
)

pytestmark = pytest.mark.django_db


def descriptions(question: dict) -> list[str]:
    return [level["description"] for level in question["levels"]]


def test_a_new_campaign_describes_each_question_with_its_own_levels():
    campaign = crowd_campaign(clips=1)

    assert campaign.rubric == Rubric.PER_CRITERION
    by_key = {question["key"]: question for question in campaign.questions}
    assert descriptions(by_key["fluency"]) == [
        "Natural, grammatical English that reads easily.",
        "Reads well, with at most one small slip (e.g. a missing article).",
        "Noticeable grammatical errors or awkward wording, but easy to understand.",
        "Errors make it hard to read; the meaning has to be guessed in places.",
        "Broken or incomprehensible text.",
    ]
    assert descriptions(by_key["relevance"])[0] == (
        "Everything the caption says is in the clip; nothing is wrong or invented."
    )
    assert by_key["descriptiveness"]["levels"] == PER_CRITERION_LEVELS["descriptiveness"]
    # Fluency says nothing of the video, relevance nothing of grammar.
    assert not any("video" in text or "clip" in text for text in descriptions(by_key["fluency"]))
    assert not any("grammat" in text for text in descriptions(by_key["relevance"]))
    assert [level["value"] for level in by_key["fluency"]["levels"]] == [5, 4, 3, 2, 1]


def test_the_papers_rubric_stays_available_and_gives_every_question_the_same_levels():
    campaign = crowd_campaign(clips=1, rubric=Rubric.PAPER)

    assert Campaign.objects.get(pk=campaign.pk).rubric == "paper"
    assert [question["levels"] for question in campaign.questions] == [PAPER_LEVELS] * 3
    assert campaign.questions[2]["levels"][4]["description"] == (
        "Minimal description, fundamentally unrelated to the video, or frequent errors that make "
        "it incomprehensible."
    )


def test_a_question_of_the_curators_own_gets_levels_about_that_question():
    campaign = crowd_campaign(clips=1, questions=[{"key": "humour", "label": "Humour"}])

    assert campaign.questions[0]["levels"] == PER_CRITERION_OTHER_LEVELS
    assert campaign.questions[0]["levels"][0]["description"] == (
        "Fully meets what this question asks."
    )


def test_a_custom_rubric_takes_the_levels_each_question_gives_and_requires_them():
    levels = [
        {"value": 1, "label": "No", "description": "wrong"},
        {"value": 3, "label": "Yes", "description": "right"},
    ]
    campaign = crowd_campaign(
        clips=1, rubric="custom", questions=[{"key": "correct", "levels": levels}]
    )
    assert campaign.questions[0]["levels"] == [
        {"value": 3, "label": "Yes", "description": "right"},
        {"value": 1, "label": "No", "description": "wrong"},
    ]

    clips_with_candidates(clips=1, system="other")
    with pytest.raises(CampaignInvalid) as refused:
        campaign_create(
            slug="no-levels", name="No levels", rubric="custom", questions=[{"key": "correct"}]
        )
    assert refused.value.errors == {
        "questions[0].levels": ["With the custom rubric every question gives its levels."]
    }
    assert not Campaign.objects.filter(slug="no-levels").exists()


def test_levels_that_are_not_the_rubrics_are_refused_and_nothing_is_created():
    clips_with_candidates(clips=1)
    questions = [{"key": "fluency", "levels": PAPER_LEVELS}]

    with pytest.raises(CampaignInvalid) as refused:
        campaign_create(slug="mixed", name="Mixed", questions=questions)

    assert refused.value.errors == {
        "questions[0].levels": [
            "These levels are not the rubric's: leave them out (the rubric gives them) or choose "
            "the custom rubric."
        ]
    }
    assert Campaign.objects.count() == 0
    with pytest.raises(CampaignInvalid) as imported:
        campaign_create(slug="imported", name="Imported", rubric="imported")
    assert imported.value.errors == {"rubric": ["One of per_criterion, paper, custom."]}
    assert Campaign.objects.count() == 0


def test_a_new_rubric_relevels_the_questions_until_workers_have_rated():
    campaign = crowd_campaign(clips=1, candidates_per_clip=1, judgments_per_candidate=1)

    campaign_update(campaign=campaign, rubric=Rubric.PAPER)
    campaign.refresh_from_db()
    assert campaign.rubric == "paper"
    assert [question["levels"] for question in campaign.questions] == [PAPER_LEVELS] * 3

    token, _participation = crowd_join(campaign, "5f0000000000000000000001")
    worker = worker_client(token)
    offer = worker.post(NEXT).json()
    stored = worker.post(
        submit_url(offer["assignment_id"]),
        {"ratings": all_candidate_ratings(offer)},
        format="json",
    )
    assert stored.status_code == 201

    with pytest.raises(CampaignInvalid) as frozen:
        campaign_update(campaign=campaign, rubric=Rubric.PER_CRITERION)
    assert frozen.value.errors == {
        "questions": ["Cannot change once workers have submitted judgments."],
        "rubric": ["Cannot change once workers have submitted judgments."],
    }
    campaign.refresh_from_db()
    assert campaign.rubric == "paper"
    assert [question["levels"] for question in campaign.questions] == [PAPER_LEVELS] * 3
    assert Judgment.objects.count() == 1


def test_the_page_shows_under_each_question_the_levels_of_that_question(client):
    crowd_campaign(clips=1, slug="criteria")
    crowd_campaign(clips=1, slug="paper", rubric=Rubric.PAPER)

    criteria = client.get("/w/criteria/?PROLIFIC_PID=5f0000000000000000000002").content.decode()
    paper = client.get("/w/paper/?PROLIFIC_PID=5f0000000000000000000002").content.decode()

    fluency = criteria[criteria.index('data-rubric="fluency"') :]
    fluency = fluency[: fluency.index("</table>")]
    assert "<td>Broken or incomprehensible text.</td>" in fluency
    assert "unrelated" not in fluency
    assert criteria.count('class="rubric"') == 3
    assert "fundamentally unrelated to the video" not in criteria
    # The paper's rubric: one guide, said to apply to every question.
    assert paper.count('class="rubric"') == 1
    assert "The same guide applies to every question." in paper
    assert "<td>Minimal description, fundamentally unrelated to the video, or frequent" in paper


@pytest.mark.django_db(transaction=True)
def test_the_migration_keeps_the_papers_rubric_for_existing_campaigns():
    executor = MigrationExecutor(connection)
    before = [("annotation", "0013_judgment_exclusions_in_place")]
    after = [("annotation", "0014_campaign_rubric")]
    executor.migrate(before)
    old = executor.loader.project_state(before).apps.get_model("annotation", "Campaign")
    paper = [{"key": "fluency", "label": "Fluency", "levels": PAPER_LEVELS}]
    own = [{"key": "ok", "label": "Ok", "levels": [{"value": 0, "label": "No"}, {"value": 1}]}]
    old.objects.create(slug="old-paper", name="a", questions=paper)
    old.objects.create(slug="old-own", name="b", questions=own)
    old.objects.create(slug="old-import", name="c", questions=paper, is_imported=True)
    try:
        executor = MigrationExecutor(connection)
        executor.migrate(after)
        new = executor.loader.project_state(after).apps.get_model("annotation", "Campaign")
        assert dict(new.objects.values_list("slug", "rubric")) == {
            "old-paper": "paper",
            "old-own": "custom",
            "old-import": "imported",
        }
        # A row written without a rubric (raw SQL, e.g. the benchmarks' loaders) is per-criterion.
        with connection.cursor() as cursor:
            cursor.execute(
                "INSERT INTO annotation_campaign (slug, name, description, instructions, status,"
                " questions, overall_question_key, judgments_per_candidate, reference_free,"
                " lease_seconds, min_seconds_on_clip, control_rate, control_settings, qc_rules,"
                " review_range_threshold, pay_per_assignment, currency, completion_code,"
                " redirect_url, is_imported, selection, created_at, updated_at)"
                " VALUES ('raw', 'raw', '', '', 'active', '[]', '', 3, false, 900, 0, 0, '{}',"
                " '{}', 3, 0, 'GBP', '', '', false, '{}', now(), now()) RETURNING rubric"
            )
            assert cursor.fetchone() == ("per_criterion",)
    finally:
        MigrationExecutor(connection).migrate(
            MigrationExecutor(connection).loader.graph.leaf_nodes()
        )


NEW_CAMPAIGN_FORM = {
    "name": "From the page",
    "status": "active",
    "question_preset": "paper",
    "judgments_per_candidate": "2",
    "lease_seconds": "600",
    "min_seconds_on_clip": "0",
    "pay_per_assignment": "0",
    "currency": "GBP",
}


def test_the_campaign_pages_choose_the_rubric_and_edit_the_questions_without_its_levels(
    curator_client,
):
    clips_with_candidates(clips=1)
    default = curator_client.post(
        "/dashboard/campaigns/new/", {**NEW_CAMPAIGN_FORM, "slug": "default-rubric"}
    )
    paper = curator_client.post(
        "/dashboard/campaigns/new/", {**NEW_CAMPAIGN_FORM, "slug": "paper", "rubric": "paper"}
    )
    assert (default.status_code, paper.status_code) == (302, 302)
    assert dict(Campaign.objects.values_list("slug", "rubric")) == {
        "default-rubric": "per_criterion",
        "paper": "paper",
    }
    assert [q["levels"] for q in Campaign.objects.get(slug="paper").questions] == [PAPER_LEVELS] * 3

    # The edit page: the rubric chosen, the questions without levels (the rubric gives them).
    page = curator_client.get("/dashboard/campaigns/paper/edit/")
    initial = page.context["form"].initial
    assert initial["rubric"] == "paper"
    assert "levels" not in initial["questions_json"]
    data = {name: value for name, value in initial.items() if value is not None}
    data.update({"rubric": "per_criterion", "redirect_url": ""})
    response = curator_client.post("/dashboard/campaigns/paper/edit/", data)
    assert response.status_code == 302
    campaign = Campaign.objects.get(slug="paper")
    assert campaign.rubric == "per_criterion"
    assert campaign.questions[2]["levels"] == PER_CRITERION_LEVELS["fluency"]
