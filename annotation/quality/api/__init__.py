"""Curator API of quality control under /api/v1/campaigns/<slug>/ (namespace `annotation_api`),
one module per resource; `urls.py` maps them."""
