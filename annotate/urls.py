from django.contrib import admin
from django.templatetags.static import static
from django.urls import include, path
from django.views.generic import RedirectView
from drf_spectacular.views import SpectacularAPIView
from rest_framework.permissions import IsAuthenticated

from annotate.health import healthz
from labeling.api.docs import api_docs
from labeling.staff import views as dashboard_views


class FaviconRedirect(RedirectView):
    permanent = True

    def get_redirect_url(self, *args: object, **kwargs: object) -> str:
        # Resolved per request: the static storage's manifest may not exist at import time.
        return static("favicon.svg")


urlpatterns = [
    # The labeler's pages first: a URL is resolved by trying the patterns in
    # order, and a key press (the most frequent request by far) should not be
    # tried against the admin's, the API's and the dashboard's first. None of
    # them overlaps another.
    path("", include("labeling.urls")),
    path("healthz/", healthz, name="healthz"),
    # Browsers ask for /favicon.ico on pages that link none (the API's JSON, files).
    path("favicon.ico", FaviconRedirect.as_view(), name="favicon"),
    # One sign-in page for everyone, so the login throttle (labeling.web.auth) has no side door.
    path("admin/login/", RedirectView.as_view(pattern_name="login", query_string=True), name="admin-login"),
    path("admin/", admin.site.urls),
    path("api/schema/", SpectacularAPIView.as_view(permission_classes=[IsAuthenticated]), name="api-schema"),
    path("api/docs/", api_docs, name="api-docs"),
    path("api/", include("labeling.api.urls")),
    path("dashboard/", dashboard_views.dashboard, name="dashboard"),
    path("dashboard/exports/<int:pk>/", dashboard_views.export_job_card, name="dashboard-export-job"),
    path("dashboard/exports/", dashboard_views.export_job_start, name="dashboard-export-start"),
]

handler404 = "annotate.errors.not_found"
