"""Quality control of crowd judgments: worker statistics and rules, exclusions, control items,
agreement, the expert review queue and aggregation into one score per candidate.

A subpackage of the `annotation` app (its models, migrations, Celery task names and URL names
belong to the app); docs/quality.md has the table of modules and the direction of their imports.
"""
