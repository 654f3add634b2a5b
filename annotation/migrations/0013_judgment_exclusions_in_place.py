# Excluding a judgment rewrites its row: is_excluded, excluded_by, the reason and the numbers
# behind it (a row of about 185 bytes becomes one of about 930 with a rule's explanation). With
# `is_excluded` indexed, and judgment pages filled to the brim by the inserts, no such update could
# stay on its page: each wrote a new row version elsewhere and a new entry into all ten indexes of
# the table (measured on the QC benchmark's 20,001 exclusions: 243,022 WAL records, 1.3 s). Without
# that index, and with fillfactor 85 (about 1.2 kB left free on each page, room for the new
# version of one excluded judgment), the same UPDATE is HOT for every row: 20,001 WAL records.
# No query needs the index: excluded judgments are always looked up within a campaign, a worker
# or a page of rows, and "how many are excluded" counts are aggregates over those (see
# docs/quality.md, "Storage note"). Only pages written from now on follow the fillfactor
# (existing rows are not rewritten); the table grows by about 8% for new pages.

from django.db import migrations, models

TABLE = "annotation_judgment"


class Migration(migrations.Migration):
    dependencies = [
        ("annotation", "0012_campaigncandidate_fillfactor_room_for_first_aggregates"),
    ]

    operations = [
        migrations.AlterField(
            model_name="judgment",
            name="is_excluded",
            field=models.BooleanField(default=False),
        ),
        migrations.RunSQL(
            f"ALTER TABLE {TABLE} SET (fillfactor = 85)",
            reverse_sql=f"ALTER TABLE {TABLE} RESET (fillfactor)",
        ),
    ]
