"""What every admin page of the project shares: fast list pages, read-only rows, KaTeX, solution steps.

List pages stay fast at release scale (a million step ratings, ~100k
assignments): every list names its ``list_select_related``, never filters or
sorts on JSON, does not ask for the unfiltered total (``show_full_result_count``)
or facet counts, and pages with ``EstimatedCountPaginator``, which reads
PostgreSQL's row estimate instead of counting an unfiltered table.
"""

from __future__ import annotations

import re
from typing import Any

from django import forms
from django.contrib import admin
from django.core.paginator import Paginator
from django.db import connection
from django.http import HttpRequest
from django.utils.functional import cached_property
from django.utils.html import format_html, format_html_join
from django.utils.safestring import SafeString

from labeling.data.display import isolated

# Below this many rows an exact count is cheap and the estimate may be stale.
_ESTIMATE_ABOVE = 10_000

KATEX_MEDIA = forms.Media(
    css={"all": ["vendor/katex/katex.min.css"]},
    js=["vendor/katex/katex.min.js", "vendor/katex/auto-render.min.js", "js/admin-katex.js"],
)


class EstimatedCountPaginator(Paginator):  # type: ignore[type-arg]
    """Unfiltered lists on PostgreSQL take the planner's row estimate (pg_class.reltuples) as their count.

    ``SELECT COUNT(*)`` over a million-row table is a full scan on every page
    view; the estimate is kept fresh by autovacuum/ANALYZE and only sizes the
    page links. Filtered lists, small tables and SQLite count exactly.
    """

    @cached_property
    def count(self) -> int:
        query = getattr(self.object_list, "query", None)
        if connection.vendor == "postgresql" and query is not None and not query.where:
            with connection.cursor() as cursor:
                cursor.execute(
                    "SELECT reltuples::bigint FROM pg_class WHERE oid = to_regclass(%s)",
                    [query.model._meta.db_table],
                )
                row = cursor.fetchone()
            if row is not None and row[0] is not None and row[0] > _ESTIMATE_ABOVE:
                return int(row[0])
        return int(super().count)


class FastListAdmin(admin.ModelAdmin):  # type: ignore[type-arg]
    paginator = EstimatedCountPaginator
    show_full_result_count = False
    show_facets = admin.ShowFacets.NEVER
    list_per_page = 50


class ReadOnlyAdminMixin:
    """Rows written only by services: the admin shows them and changes nothing."""

    def has_add_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False


def steps_html(steps: list[str] | None, *, numbered_from: int = 1) -> SafeString:
    if not steps:
        return format_html("<em>{}</em>", "no steps (phase-1 placeholder)")
    items = format_html_join(
        "",
        "<li value='{}'{}>{}</li>",
        (
            # A step that starts with its own number ("1. We have ...", common in model
            # solutions) keeps it and gets no list marker, so it does not read "1. 1. We have".
            (i, SafeString(" style='list-style: none'") if _numbers_itself(s, i) else "", isolated(s))
            for i, s in enumerate(steps, numbered_from)
        ),
    )
    return format_html('<ol class="math solution-steps">{}</ol>', items)


_OWN_NUMBER = re.compile(r"\s*(?:step\s*)?(\d+)\s*[.):]\s", re.IGNORECASE)


def _numbers_itself(step: str, number: int) -> bool:
    found = _OWN_NUMBER.match(step)
    return found is not None and int(found.group(1)) == number
