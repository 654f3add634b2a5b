# The first QC run of a campaign fills the aggregate columns of every candidate row: a row of about
# 100 bytes as imported (means '{}', NULL scores) becomes one of about 220 bytes (three means, the
# scores). At fillfactor 50 a page has room for the new versions of fewer than half of its rows,
# so more than half of the updates could not stay on their page: each wrote a new entry into all
# six indexes of the table, and the table and its indexes grew by half. At fillfactor 30 the new
# versions of every row fit beside the old ones and every update is HOT (measured at 333,333
# candidates: the UPDATE took 2.2 s instead of 6.8 s, WAL 73 MB instead of 181 MB, and the table
# ends smaller: 109 MB against 142 MB after the first run). Later runs change few rows and reuse
# the room freed by pruning. See docs/benchmarks.md, "Quality control at scale".
# Only pages written from now on follow the setting (existing rows are not rewritten).

from django.db import migrations

TABLE = "annotation_campaigncandidate"


class Migration(migrations.Migration):
    dependencies = [
        ("annotation", "0011_data_browser_sort_indexes"),
    ]

    operations = [
        migrations.RunSQL(
            f"ALTER TABLE {TABLE} SET (fillfactor = 30)",
            reverse_sql=f"ALTER TABLE {TABLE} SET (fillfactor = 50)",
        ),
    ]
