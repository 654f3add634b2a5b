"""URL configuration. Each app mounts its pages and its API here; see the app's urls.py and
api_urls.py."""

from __future__ import annotations

from django.contrib import admin
from django.contrib.auth import views as auth_views
from django.urls import include, path
from django.views.generic import RedirectView
from drf_spectacular.views import SpectacularAPIView

from common import views as common_views
from common.ratelimit import LoginView

urlpatterns = [
    path("", RedirectView.as_view(url="/dashboard/", permanent=False), name="home"),
    path("admin/", admin.site.urls),
    # Django's login page behind the lockout (common.ratelimit), logout and the logged-in password
    # change. Django's reset-by-mail flow is not mounted: Lepus sends no mail, so it could only
    # offer an unthrottled form that mails nobody; an operator resets a curator's password with
    # `manage.py changepassword` (docs/deployment.md).
    path("accounts/login/", LoginView.as_view(), name="login"),
    path("accounts/logout/", auth_views.LogoutView.as_view(), name="logout"),
    path(
        "accounts/password_change/",
        auth_views.PasswordChangeView.as_view(),
        name="password_change",
    ),
    path(
        "accounts/password_change/done/",
        auth_views.PasswordChangeDoneView.as_view(),
        name="password_change_done",
    ),
    path("healthz", common_views.healthz, name="healthz"),
    path("favicon.ico", common_views.favicon, name="favicon"),
    path("media/s/<path:key>", common_views.signed_media, name="signed-media"),
    path("api/schema/", SpectacularAPIView.as_view(), name="api-schema"),
    path("api/v1/", include("datasets_app.api_urls")),
    path("api/v1/", include("annotation.api_urls")),
    path("api/v1/", include("annotation.webhooks.api_urls")),
    path("api/v1/", include("export.api_urls")),
    path("api/v1/", include("training_bridge.api_urls")),
    path("w/", include("annotation.worker_urls")),
    path("dashboard/", include("annotation.urls")),
    path("dashboard/webhooks/", include("annotation.webhooks.urls")),
    path("dashboard/releases/", include("export.urls")),
    path("dashboard/training/", include("training_bridge.urls")),
]

# JSON under /api/ (a path parameter the URL pattern refuses is still an API answer).
handler404 = "common.api.page_not_found"
handler500 = "common.api.server_error"
