"""HTML pages of training_bridge, under /dashboard/training/."""

from __future__ import annotations

from common.routes import patterns
from training_bridge import views

app_name = "training_bridge"
urlpatterns = patterns(views)
