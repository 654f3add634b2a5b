"""`lepus_sorted_merge(stored, removed, added)`: a sorted array less some values plus others,
kept sorted, without sorting it again: each removed value is found (`array_position`) and cut
out, each added one placed by binary search; the array is sliced and joined in C. A quality
pass moves a worker's sorted median values with it (`running_store.median_values_read` /
`_write`): its work grows with the values changed, not with the worker's history (but for
copying the array's bytes)."""

from django.db import migrations

CREATE = r"""
CREATE OR REPLACE FUNCTION lepus_sorted_merge(stored anyarray, removed anyarray, added anyarray)
RETURNS anyarray LANGUAGE plpgsql IMMUTABLE PARALLEL SAFE AS $$
DECLARE
    merged stored%TYPE := COALESCE(stored, added[1:0]);
    found integer;
    low integer;
    high integer;
    middle integer;
BEGIN
    FOR i IN 1 .. COALESCE(cardinality(removed), 0) LOOP
        found := array_position(merged, removed[i]);
        IF found IS NULL THEN
            RAISE EXCEPTION 'lepus_sorted_merge: a value to remove is not there (%)', removed[i];
        END IF;
        merged := merged[1:found - 1] || merged[found + 1:];
    END LOOP;
    FOR i IN 1 .. COALESCE(cardinality(added), 0) LOOP
        -- The first position holding a larger value.
        low := 1;
        high := COALESCE(cardinality(merged), 0) + 1;
        WHILE low < high LOOP
            middle := (low + high) / 2;
            IF merged[middle] <= added[i] THEN
                low := middle + 1;
            ELSE
                high := middle;
            END IF;
        END LOOP;
        merged := merged[1:low - 1] || added[i:i] || merged[low:];
    END LOOP;
    RETURN merged;
END
$$;
"""


class Migration(migrations.Migration):
    dependencies = [("annotation", "0019_running_worker_statistics")]

    operations = [
        migrations.RunSQL(
            CREATE,
            reverse_sql="DROP FUNCTION IF EXISTS lepus_sorted_merge(anyarray, anyarray, anyarray)",
        )
    ]
