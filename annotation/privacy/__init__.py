"""The privacy wing: erasing a participant (docs/privacy.md), over the API, the worker's erase page,
the curators' erase action and the `erase_participant` command (docs/architecture.md)."""
