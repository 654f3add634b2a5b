"""ReleaseRecord keyed by (release, campaign candidate), without foreign-key constraints or extra
indexes: a build writes hundreds of thousands of rows, and each index or deferred constraint check
costs as much as the insert. Django cannot turn a table's primary key into a composite one in
place, so the rows move to a new table that then takes the old one's name."""

import django.db.models.deletion
from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("annotation", "0001_initial"),
        ("datasets_app", "0001_initial"),
        ("export", "0001_initial"),
    ]

    operations = [
        migrations.CreateModel(
            name="ReleaseRecordNew",
            fields=[
                (
                    "pk",
                    models.CompositePrimaryKey(
                        "release",
                        "campaign_candidate",
                        blank=True,
                        editable=False,
                        primary_key=True,
                        serialize=False,
                    ),
                ),
                (
                    "split",
                    models.PositiveSmallIntegerField(
                        choices=[(0, "train"), (1, "validation"), (2, "test")]
                    ),
                ),
                ("overall", models.FloatField()),
                ("training_class", models.PositiveSmallIntegerField(blank=True, null=True)),
                ("kept_judgments", models.PositiveIntegerField(default=0)),
                (
                    "campaign_candidate",
                    models.ForeignKey(
                        db_constraint=False,
                        db_index=False,
                        on_delete=django.db.models.deletion.DO_NOTHING,
                        related_name="+",
                        to="annotation.campaigncandidate",
                    ),
                ),
                (
                    "candidate",
                    models.ForeignKey(
                        db_constraint=False,
                        db_index=False,
                        on_delete=django.db.models.deletion.DO_NOTHING,
                        related_name="+",
                        to="datasets_app.candidatecaption",
                    ),
                ),
                (
                    "clip",
                    models.ForeignKey(
                        db_constraint=False,
                        db_index=False,
                        on_delete=django.db.models.deletion.DO_NOTHING,
                        related_name="+",
                        to="datasets_app.clip",
                    ),
                ),
                (
                    "release",
                    models.ForeignKey(
                        db_constraint=False,
                        db_index=False,
                        on_delete=django.db.models.deletion.CASCADE,
                        related_name="+",
                        to="export.release",
                    ),
                ),
            ],
        ),
        migrations.RunSQL(
            "INSERT INTO export_releaserecordnew (release_id, campaign_candidate_id, candidate_id,"
            " clip_id, split, overall, training_class, kept_judgments)"
            " SELECT release_id, campaign_candidate_id, candidate_id, clip_id, split, overall,"
            " training_class, kept_judgments FROM export_releaserecord",
            reverse_sql=migrations.RunSQL.noop,
        ),
        migrations.DeleteModel(name="ReleaseRecord"),
        migrations.RenameModel(old_name="ReleaseRecordNew", new_name="ReleaseRecord"),
        migrations.AlterField(
            model_name="releaserecord",
            name="release",
            field=models.ForeignKey(
                db_constraint=False,
                db_index=False,
                on_delete=django.db.models.deletion.CASCADE,
                related_name="records",
                to="export.release",
            ),
        ),
    ]
