"""Campaign pages of the dashboard (the crowd wing): the list at /dashboard/, create, edit, entry
links and invites, payments CSV, the campaign figures CSV, the preview as a worker and its four endpoints. The campaign's own page (`annotation:campaign-detail`,
/dashboard/campaigns/<slug>/) belongs to the quality pages."""

from __future__ import annotations

from annotation.crowd.views import campaigns, preview
from common.routes import patterns

urlpatterns = patterns(campaigns, preview)
