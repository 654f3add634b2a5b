"""Quality pages of the dashboard (/dashboard/campaigns/<slug>/...): the campaign page
(`annotation:campaign-detail`), workers, review, audit log, leaderboard. One worker's page is the
curation wing's (it is also the data browser's worker page); erasing is the privacy wing's."""

from __future__ import annotations

from annotation.quality import views
from common.routes import patterns

urlpatterns = patterns(views)
