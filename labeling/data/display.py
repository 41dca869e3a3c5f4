"""How stored text is shown to people: isolated from the page's direction, with invisible characters made visible.

Problems, steps, answers and what labelers write come from imports and from
people. A right-to-left override (U+202E) in them would reorder the text
around it on screen ("\\u202eevil" reads "live"), and a zero-width character
would hide a difference; either can make a labeler rate what is not there.
So every such text is shown inside ``<bdi>`` (its own direction, unable to
reach outside), and each format or control character is drawn as its code
point, e.g. ⟨U+202E⟩. Plain code: no ORM.
"""

from __future__ import annotations

import unicodedata
from html import escape

from django.utils.safestring import SafeString

# Whitespace a text may carry as it is; every other control (Cc) or format
# (Cf) character, and the line and paragraph separators, is shown.
_KEPT = frozenset("\n\r\t")
_SHOWN_CATEGORIES = frozenset({"Cc", "Cf", "Zl", "Zp"})
# str.isprintable() is False for every character of those categories (and for
# a few more: Zs but the space, Co, Cn, Cs), so a text that is printable once
# the kept whitespace is removed has nothing to show: checked in C, not per
# character in Python (a task panel holds thousands of characters).
_DROP_KEPT = str.maketrans("", "", "\n\r\t")


def _has_hidden(text: str) -> bool:
    return not text.translate(_DROP_KEPT).isprintable()


def is_hidden_character(ch: str) -> bool:
    return ch not in _KEPT and unicodedata.category(ch) in _SHOWN_CATEGORIES


def visible_controls(text: str) -> SafeString:
    """``text`` as HTML, escaped, each hidden character drawn as ⟨U+XXXX⟩ (its name in the title)."""
    # Runs of plain text are escaped whole: escaping character by character
    # was most of the task panel's rendering time.
    if not _has_hidden(text):
        return SafeString(escape(text))  # the standard library escape Django's calls, without its lazy-string wrapper
    out: list[str] = []
    start = 0
    for i, ch in enumerate(text):
        if is_hidden_character(ch):
            if start < i:
                out.append(escape(text[start:i]))
            code = f"U+{ord(ch):04X}"
            name = unicodedata.name(ch, "control character")
            out.append(f'<span class="ctl" title="{escape(name)}">\u27e8{code}\u27e9</span>')
            start = i + 1
    if start < len(text):
        out.append(escape(text[start:]))
    return SafeString("".join(out))  # every piece above is escaped


def isolated(text: str | None) -> SafeString:
    """``text`` as HTML inside ``<bdi>``, with hidden characters visible (visible_controls)."""
    return SafeString(f"<bdi>{visible_controls(text or '')}</bdi>")  # escaped by visible_controls
