"""Text cells of the CSV files Lepus writes, made safe to open in a spreadsheet program.

A cell that starts with `=`, `+`, `-` or `@` is a formula in Excel, LibreOffice and Google Sheets,
and so is one that starts with a tab or a carriage return, which some of them skip first: a
campaign named `=HYPERLINK("https://evil.example", "open")` would be a live link in campaigns.csv,
a caption starting with `=` a formula in a release's CSV. Every CSV the platform writes passes its
text cells through this one rule: such a cell gets an apostrophe in front, which spreadsheets
show as text and a program reading the CSV sees as one more character. Numbers are written as
numbers (a negative score stays `-0.25`), and JSONL and Parquet keep the exact text.

`spreadsheet_safe` is the rule in Python (payments, campaigns.csv); the release CSV, written in
SQL, applies the same `FORMULA_STARTS` (`export.records.sql_csv_string`).
"""

from __future__ import annotations

FORMULA_STARTS = ("=", "+", "-", "@", "\t", "\r")
NEUTRALISING_PREFIX = "'"


def spreadsheet_safe(value: str) -> str:
    """`value`, with an apostrophe in front when a spreadsheet would read it as a formula."""
    return f"{NEUTRALISING_PREFIX}{value}" if value[:1] in FORMULA_STARTS else value
