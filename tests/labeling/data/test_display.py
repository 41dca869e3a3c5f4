"""Stored text on screen: escaped, bidi-isolated, hidden characters drawn as their code points."""

from __future__ import annotations

from labeling.data.display import isolated, visible_controls


def test_bidi_controls_and_invisible_characters_are_drawn_and_whitespace_is_kept() -> None:
    html = visible_controls("a\u202eb\u200bc\u2066d\x07e\tf\ng\u2028h")
    for code in ("U+202E", "U+200B", "U+2066", "U+0007", "U+2028"):
        assert f"\u27e8{code}\u27e9" in html
    assert "\t" in html and "\n" in html
    assert not any(ch in html for ch in "\u202e\u200b\u2066\x07\u2028")


def test_text_is_escaped_and_isolated() -> None:
    assert isolated("<b>x</b> & \u202e") == (
        "<bdi>&lt;b&gt;x&lt;/b&gt; &amp; "
        '<span class="ctl" title="RIGHT-TO-LEFT OVERRIDE">\u27e8U+202E\u27e9</span></bdi>'
    )
    assert isolated(None) == "<bdi></bdi>"


def test_every_hidden_character_is_drawn_alone_and_amid_plain_text() -> None:
    # visible_controls skips its per-character scan for text with nothing to
    # show; no hidden character of any plane may slip through that check.
    import sys

    from labeling.data.display import is_hidden_character

    hidden = [ch for ch in map(chr, range(sys.maxunicode + 1)) if is_hidden_character(ch)]
    assert len(hidden) > 200  # Cc, Cf, Zl, Zp
    for ch in hidden:
        code = f"\u27e8U+{ord(ch):04X}\u27e9"
        assert code in visible_controls(ch)
        assert code in visible_controls(f"Step 1:\n$x = 2$ {ch} so\tx")


def test_plain_text_comes_back_escaped_as_it_is() -> None:
    text = "Let $x < 3$ & \u00e9t\u00e9: \u03c0 \u2264 4\n\tdone \u4e2d\U0001f600"
    assert visible_controls(text) == text.replace("&", "&amp;").replace("<", "&lt;")
