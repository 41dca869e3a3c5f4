"""Error pages: API paths answer JSON, as the schema documents; everything else gets Django's page."""

from __future__ import annotations

from django.http import HttpRequest, HttpResponse, JsonResponse
from django.views import defaults


def not_found(request: HttpRequest, exception: Exception) -> HttpResponse:
    # A path no API route matches (e.g. a negative id, which <int:pk> refuses) is still an API answer.
    if request.path.startswith("/api/"):
        return JsonResponse({"detail": "Not found."}, status=404)
    return defaults.page_not_found(request, exception)
