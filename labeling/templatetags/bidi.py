"""``{{ text|isolated }}``: stored text shown bidi-isolated, hidden characters visible (labeling.data.display)."""

from __future__ import annotations

from django import template
from django.utils.safestring import SafeString

from labeling.data.display import isolated as isolated_html

register = template.Library()


@register.filter
def isolated(text: str | None) -> SafeString:
    return isolated_html(text)
