"""Curator API, pages and command for the signed webhooks of `common.webhooks` (docs/webhooks.md).

They live in annotation, above common, because endpoints are registered per campaign (by slug)."""
