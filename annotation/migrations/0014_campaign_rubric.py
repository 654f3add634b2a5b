"""Campaign.rubric: whose words describe the rating levels (annotation.questions.Rubric).

Campaigns made before this migration were shown the Rigel paper's holistic rubric (Appendix C),
so they are recorded as `paper`; imported campaigns as `imported`; a campaign whose stored levels
are not the paper's (levels given through the API) as `custom`. New campaigns default to the
per-criterion rubric."""

from django.db import migrations, models

# The paper's level descriptions as the campaigns stored them (annotation.questions.PAPER_LEVELS
# when this migration was written), best first.
PAPER_DESCRIPTIONS = [
    "Comprehensively and accurately describes all observed objects, relationships and contextual "
    "details, with no grammatical errors or at most one minor error.",
    "Describes most objects and relationships with only minor omissions or inaccuracies, and is "
    "generally natural and comprehensible.",
    "Mentions key objects but lacks detail in relationships or other attributes, or contains "
    "significant inaccuracies or noticeable grammatical errors, yet remains understandable.",
    "Describes a few objects but omits significant details, contains numerous inaccuracies, or "
    "has errors that make it difficult to read.",
    "Minimal description, fundamentally unrelated to the video, or frequent errors that make it "
    "incomprehensible.",
]


def _has_paper_levels(questions):
    for question in questions or []:
        levels = sorted(question.get("levels") or [], key=lambda level: -int(level["value"]))
        if [level.get("description") for level in levels] != PAPER_DESCRIPTIONS:
            return False
    return True


def existing_rubrics(apps, schema_editor):
    Campaign = apps.get_model("annotation", "Campaign")
    for campaign in Campaign.objects.only("id", "questions", "is_imported").iterator():
        if campaign.is_imported:
            rubric = "imported"
        elif _has_paper_levels(campaign.questions):
            rubric = "paper"
        else:
            rubric = "custom"
        if rubric != "paper":
            Campaign.objects.filter(pk=campaign.pk).update(rubric=rubric)


class Migration(migrations.Migration):
    dependencies = [("annotation", "0013_judgment_exclusions_in_place")]

    operations = [
        # Every existing row gets the paper's rubric (what its workers were shown) ...
        migrations.AddField(
            model_name="campaign",
            name="rubric",
            field=models.CharField(default="paper", max_length=20),
            preserve_default=False,
        ),
        # ... except imported campaigns and campaigns with levels of their own.
        migrations.RunPython(existing_rubrics, migrations.RunPython.noop),
        # New campaigns: the per-criterion levels.
        migrations.AlterField(
            model_name="campaign",
            name="rubric",
            field=models.CharField(
                choices=[
                    (
                        "paper",
                        "The Rigel paper's rubric (Appendix C): one holistic rubric for every "
                        "question",
                    ),
                    ("per_criterion", "Per-criterion levels (Lepus's own wording, not the paper's)"),
                    ("custom", "Custom levels given with each question"),
                    ("imported", "Imported judgments (rated under their source's own instructions)"),
                ],
                db_default="per_criterion",
                default="per_criterion",
                max_length=20,
            ),
        ),
    ]
