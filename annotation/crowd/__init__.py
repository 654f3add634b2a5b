"""The crowd wing: campaigns, worker identities, assignment, submission, repeats, payments and the
preview; the worker API, the curators' campaign API, the campaign and worker pages, and the
publisher of the after-submission quality work (docs/architecture.md)."""
