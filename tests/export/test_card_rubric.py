"""The release says which rubric its campaigns' workers read: the card names each campaign's
rubric (the Rigel paper's holistic one, or per-criterion levels in Lepus's own wording), and the
manifest holds the level descriptions per campaign and question."""

from __future__ import annotations

from annotation.questions import PAPER_LEVELS, PER_CRITERION_LEVELS, Rubric, default_questions
from tests.export.builders import build_campaign
from tests.export.helpers import build, manifest, read_file


def test_the_card_and_manifest_name_the_rubric_of_each_campaign(db):
    criteria = build_campaign(slug="criteria", clips=8, workers=4).campaign
    paper = build_campaign(slug="paper", clips=8, workers=4).campaign
    paper.rubric = Rubric.PAPER
    paper.questions = default_questions(Rubric.PAPER)
    paper.save()

    release = build(campaigns=[criteria, paper], seed=3)

    card = read_file(release, "README.md").decode()
    section = card[card.index("## Rating guide (rubric)") : card.index("## Splits")]
    assert section == (
        "## Rating guide (rubric)\n"
        "\n"
        "What the workers of each campaign read under each question, from 1 (worst) to 5 (best):\n"
        "\n"
        "| campaign | rubric | questions |\n"
        "|---|---|---|\n"
        "| `criteria` | per-criterion (Lepus's own wording) | descriptiveness, relevance, "
        "fluency |\n"
        "| `paper` | the Rigel paper's (Appendix C, holistic) | descriptiveness, relevance, "
        "fluency |\n"
        "\n"
        "- The Rigel paper's (Appendix C, holistic): one description per level for all "
        "questions together (objects, relationships, accuracy and grammar), shown to workers "
        "under every question, as in the Rigel paper's Appendix C; Vid-Lepus was collected with "
        "it.\n"
        "- Per-criterion (Lepus's own wording): each question has its own level descriptions, "
        "about what it alone asks (e.g. fluency judges the language only); the wording is "
        "Lepus's own, not the Rigel paper's.\n"
        "\n"
        "The level descriptions each campaign's workers read are in `manifest.json` under\n"
        "`campaigns[].levels`, per question.\n"
        "\n"
    )

    described = {campaign["slug"]: campaign for campaign in manifest(release)["campaigns"]}
    assert described["criteria"]["rubric"] == "per_criterion"
    assert described["criteria"]["levels"] == {
        key: PER_CRITERION_LEVELS[key] for key in ("descriptiveness", "relevance", "fluency")
    }
    assert described["paper"]["rubric"] == "paper"
    assert described["paper"]["levels"] == {
        key: PAPER_LEVELS for key in ("descriptiveness", "relevance", "fluency")
    }
