"""The data browser: clips, candidates, judgments and workers as filterable, sortable tables that
page by keyset (`pagination.py`), and the detail pages behind their rows (`selectors.py`)."""
