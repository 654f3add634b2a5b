"""The curation wing: the dashboard's Data page and the data browser under it (docs/architecture.md)."""
