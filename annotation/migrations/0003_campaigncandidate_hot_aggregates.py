# Aggregation rewrites the aggregate columns of whole campaigns (hundreds of thousands of rows per
# QC run). With none of those columns indexed and free room on every page (fillfactor 50),
# PostgreSQL rewrites each row in place on its page (a HOT update) instead of inserting a new
# entry into every index of the table for every row: about 3× faster, see docs/quality.md.

from django.db import migrations, models

TABLE = "annotation_campaigncandidate"


class Migration(migrations.Migration):

    dependencies = [
        ("annotation", "0002_assignment_one_live_per_worker"),
    ]

    operations = [
        migrations.RemoveIndex(
            model_name="campaigncandidate",
            name="campaign_candidate_review",
        ),
        migrations.AlterField(
            model_name="campaigncandidate",
            name="is_finalised",
            field=models.BooleanField(default=False),
        ),
        migrations.RunSQL(
            f"ALTER TABLE {TABLE} SET (fillfactor = 50)",
            reverse_sql=f"ALTER TABLE {TABLE} RESET (fillfactor)",
        ),
    ]
