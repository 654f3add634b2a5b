"""The Data page of the dashboard (/dashboard/datasets/): imports, totals, clips by video status,
video jobs; and the data browser under it (tables of clips, candidates, judgments and workers, the
clip and candidate pages); and one worker's page in a campaign. The import page under it belongs
to the imports wing."""

from __future__ import annotations

from annotation.curation.views import browse, data, worker
from common.routes import patterns

urlpatterns = patterns(data, browse, worker)
