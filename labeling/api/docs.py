# mypy: allow-subclassing-any, allow-untyped-decorators, allow-untyped-calls
# (djangorestframework ships no type information; see pyproject [tool.mypy] overrides)
"""A plain HTML page listing the API, rendered on the server from the OpenAPI schema.

Swagger UI and Redoc load their JavaScript from a CDN unless
drf-spectacular-sidecar is installed, which it is not; this page needs neither.
"""

from __future__ import annotations

from typing import Any

from django.contrib.auth.decorators import login_required
from django.http import HttpRequest, HttpResponse
from django.shortcuts import render
from django.views.decorators.http import require_GET
from drf_spectacular.generators import SchemaGenerator

_METHODS = ("get", "post", "put", "patch", "delete")


def _ref_name(schema: dict[str, Any] | None) -> str:
    if not schema:
        return ""
    if "$ref" in schema:
        return str(schema["$ref"]).rsplit("/", 1)[-1]
    if schema.get("type") == "array":
        return f"list of {_ref_name(schema.get('items'))}"
    return str(schema.get("type", ""))


def _body(content: dict[str, Any] | None) -> str:
    if not content:
        return ""
    media, spec = next(iter(content.items()))
    name = _ref_name(spec.get("schema"))
    return f"{name} ({media})" if name else media


@login_required
@require_GET
def api_docs(request: HttpRequest) -> HttpResponse:
    schema = SchemaGenerator().get_schema(request=None, public=True)
    operations = []
    for path, item in schema["paths"].items():
        for method in _METHODS:
            op = item.get(method)
            if op is None:
                continue
            operations.append(
                {
                    "method": method.upper(),
                    "path": path,
                    "summary": (op.get("description") or "").strip(),
                    "request": _body(op.get("requestBody", {}).get("content")),
                    "responses": [
                        {"code": code, "description": r.get("description", ""), "body": _body(r.get("content"))}
                        for code, r in op.get("responses", {}).items()
                    ],
                }
            )
    # Fields flattened here: a template lookup of ``properties.items`` would
    # find a field named "items" before the dict method.
    components = [
        (
            name,
            [
                {"name": field, "type": _ref_name(spec), "read_only": spec.get("readOnly", False)}
                | {"description": spec.get("description", "")}
                for field, spec in component.get("properties", {}).items()
            ],
        )
        for name, component in sorted(schema.get("components", {}).get("schemas", {}).items())
    ]
    context = {"info": schema["info"], "operations": operations, "components": components}
    return render(request, "api/docs.html", context)
