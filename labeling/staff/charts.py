"""Small server-rendered SVG charts for the dashboard (no chart library, no JavaScript).

Every text that reaches the SVG is escaped; numbers are formatted here. Each
chart is a plain ``<svg>`` with a ``<title>`` per mark, so hovering shows the
value and screen readers get a label.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

from django.utils.html import escape
from django.utils.safestring import SafeString, mark_safe

# Series without a meaning of their own (counts, metrics): none of them green, grey or red,
# which are taken by the colour language below.
PALETTE = ["#2563eb", "#9333ea", "#ea580c", "#0891b2", "#a16207", "#db2777"]
# The one colour language of the product: the task screen's rating colours (+1 green,
# 0 grey, -1 red), and the same meaning for graded answers (correct green, wrong red,
# no answer amber, not graded light grey).
GOOD, NEUTRAL, BAD, MISSING, UNKNOWN = "#16a34a", "#6b7280", "#dc2626", "#d97706", "#cbd5e1"
RATING_COLOURS = {"+1": GOOD, "0": NEUTRAL, "-1": BAD}
ANSWER_COLOURS = {"correct": GOOD, "wrong": BAD, "no answer": MISSING, "ungraded": UNKNOWN}
# A viewBox close to the size a panel draws it at, so 13-unit text stays about 12 px.
_W, _H = 520, 220
_PAD_L, _PAD_R, _PAD_T, _PAD_B = 52, 12, 12, 44
_FONT = 13
# The width a 13-unit label takes, per character, on the wide side (system fonts
# average about 7, DejaVu Sans nearly 8): labels are laid out by it so none reaches past the viewBox,
# where the SVG clips it.
_CHAR_W = 8.0
_LEGEND_ROW = 18


def _fmt(value: float) -> str:
    if abs(value) >= 1000:
        return f"{value:,.0f}"
    if value == int(value):
        return str(int(value))
    return f"{value:.3g}"


def _legend_places(names: Sequence[str], *, x: float, right: float) -> list[tuple[float, int]]:
    """Where each legend entry goes: (x, row). Entries take as much room as their names and wrap
    to a new row rather than run past ``right`` (a chart with long series names: best-of-N's)."""
    places: list[tuple[float, int]] = []
    left, row = x, 0
    for name in names:
        width = 15 + _CHAR_W * len(name)
        if x > left and x + width > right:
            x, row = left, row + 1
        places.append((x, row))
        x += width + 16
    return places


def _legend_rows(names: Sequence[str], *, x: float, right: float = _W - _PAD_R) -> int:
    places = _legend_places(names, x=x, right=right)
    return places[-1][1] + 1 if places else 0


def _legend(names: Sequence[str], colours: Sequence[str], *, x: float, y: float, right: float = _W - _PAD_R) -> str:
    """Swatches and names, each as wide as its name (no overlap), in rows from ``y`` down."""
    parts = []
    for name, colour, (at, row) in zip(names, colours, _legend_places(names, x=x, right=right), strict=True):
        line = y + row * _LEGEND_ROW
        parts.append(
            f'<rect x="{at:.0f}" y="{line - 10:.0f}" width="11" height="11" fill="{colour}"/>'
            f'<text x="{at + 15:.0f}" y="{line}" fill="#374151">{escape(name)}</text>'
        )
    return "".join(parts)


def _x_label(text: str, *, x: float, y: float, width: int = _W) -> str:
    """An x-axis label centred under its mark, moved inwards where centring would cut it at an edge."""
    half = _CHAR_W * len(text) / 2
    x = min(max(x, half + 2), width - half - 2)
    return f'<text x="{x:.1f}" y="{y}" text-anchor="middle" fill="#374151">{escape(text)}</text>'


def _frame(body: str, *, label: str, width: int = _W, height: int = _H) -> SafeString:
    return mark_safe(
        f'<svg class="chart" viewBox="0 0 {width} {height}" role="img" aria-label="{escape(label)}" '
        f'xmlns="http://www.w3.org/2000/svg" font-size="{_FONT}" font-family="system-ui, sans-serif">{body}</svg>'
    )


def _y_axis(top: float, *, height: int = _H, integers: bool = False) -> str:
    parts = []
    plot_h = height - _PAD_T - _PAD_B
    for i in range(5):
        value = top * i / 4
        if integers and value != int(value):
            continue  # a count axis has no 2.5 tick
        y = height - _PAD_B - plot_h * i / 4
        parts.append(
            f'<line x1="{_PAD_L}" x2="{_W - _PAD_R}" y1="{y:.1f}" y2="{y:.1f}" stroke="#e5e7eb"/>'
            f'<text x="{_PAD_L - 6}" y="{y + 4:.1f}" text-anchor="end" fill="#6b7280">{_fmt(value)}</text>'
        )
    return "".join(parts)


def _nice_top(values: Sequence[float]) -> float:
    """The smallest 1/2/2.5/5 x 10^k at or above the peak: round numbers on the axis."""
    peak = max(values, default=0.0)
    if peak <= 0:
        return 1.0
    magnitude = 10.0 ** math.floor(math.log10(peak))
    return next(m * magnitude for m in (1, 2, 2.5, 5, 10) if m * magnitude >= peak)


def bar_chart(points: Sequence[tuple[str, float]], *, label: str, every: int = 1) -> SafeString:
    """Vertical bars; ``every`` labels only each n-th bar on the x axis (dense daily series)."""
    if not points:
        return _frame('<text x="50%" y="50%" text-anchor="middle" fill="#6b7280">no data yet</text>', label=label)
    top = max(4.0, _nice_top([v for _, v in points]))
    plot_w = _W - _PAD_L - _PAD_R
    plot_h = _H - _PAD_T - _PAD_B
    slot = plot_w / len(points)
    bar_w = max(1.0, slot * 0.8)
    parts = [_y_axis(top, integers=all(float(v).is_integer() for _, v in points))]
    for i, (name, value) in enumerate(points):
        h = plot_h * value / top
        x = _PAD_L + i * slot + (slot - bar_w) / 2
        y = _H - _PAD_B - h
        parts.append(
            f'<rect x="{x:.1f}" y="{y:.1f}" width="{bar_w:.1f}" height="{h:.1f}" fill="{PALETTE[0]}">'
            f"<title>{escape(name)}: {_fmt(value)}</title></rect>"
        )
        if i % every == 0:
            parts.append(_x_label(name, x=x + bar_w / 2, y=_H - _PAD_B + 17))
    return _frame("".join(parts), label=label)


def share_bars(
    rows: Sequence[tuple[str, Sequence[tuple[str, int]]]],
    *,
    label: str,
    colours: Mapping[str, str] | None = None,
) -> SafeString:
    """One horizontal 100 % bar per row, split into its named parts, with a legend.

    ``colours`` gives each part's colour by name (RATING_COLOURS, ANSWER_COLOURS).
    """
    row_h, gap, left = 24, 10, 90

    def colour(k: int, name: str) -> str:
        return (colours or {}).get(name, PALETTE[k % len(PALETTE)])

    names = [name for name, _ in rows[0][1]] if rows else []
    legend_rows = max(1, _legend_rows(names, x=left))
    height = _PAD_T + len(rows) * (row_h + gap) + 30 + (legend_rows - 1) * _LEGEND_ROW
    width = _W
    parts: list[str] = []
    for r, (row_label, values) in enumerate(rows):
        y = _PAD_T + r * (row_h + gap)
        total = sum(v for _, v in values)
        parts.append(
            f'<text x="{left - 6}" y="{y + row_h / 2 + 4}" text-anchor="end" fill="#374151">{escape(row_label)}</text>'
        )
        x = float(left)
        span = width - left - _PAD_R
        for k, (name, value) in enumerate(values):
            w = span * value / total if total else 0.0
            share = 100 * value / total if total else 0.0
            parts.append(
                f'<rect x="{x:.1f}" y="{y}" width="{w:.1f}" height="{row_h}" fill="{colour(k, name)}">'
                f"<title>{escape(row_label)}, {escape(name)}: {value:,} ({share:.1f} %)</title></rect>"
            )
            if w > 44:
                parts.append(
                    f'<text x="{x + w / 2:.1f}" y="{y + row_h / 2 + 4}" text-anchor="middle" fill="#fff">'
                    f"{share:.0f} %</text>"
                )
            x += w
    legend_y = height - 10 - (legend_rows - 1) * _LEGEND_ROW
    parts.append(_legend(names, [colour(k, n) for k, n in enumerate(names)], x=left, y=legend_y))
    if not rows:
        parts.append('<text x="50%" y="30" text-anchor="middle" fill="#6b7280">no data yet</text>')
    return _frame("".join(parts), label=label, width=width, height=max(height, 60))


def line_chart(
    x_labels: Sequence[str],
    series: Mapping[str, Sequence[float | None]],
    *,
    label: str,
    top: float | None = None,
) -> SafeString:
    """One line per series over shared x positions; None leaves a gap. All series share one
    axis, so give a chart one quantity (``top``: a fixed axis end, 1 for shares and scores)."""
    values = [v for s in series.values() for v in s if v is not None]
    if not x_labels or not values:
        return _frame('<text x="50%" y="50%" text-anchor="middle" fill="#6b7280">no data yet</text>', label=label)
    top = top if top is not None else _nice_top(values)
    plot_w = _W - _PAD_L - _PAD_R
    plot_h = _H - _PAD_T - _PAD_B
    step = plot_w / max(1, len(x_labels) - 1)
    parts = [_y_axis(top)]
    for i, name in enumerate(x_labels):
        x = _PAD_L + (i * step if len(x_labels) > 1 else plot_w / 2)
        parts.append(_x_label(name, x=x, y=_H - _PAD_B + 17))
    for k, (name, points) in enumerate(series.items()):
        color = PALETTE[k % len(PALETTE)]
        segment: list[str] = []
        for i, value in enumerate(points):
            if value is None:
                segment = []
                continue
            x = _PAD_L + (i * step if len(x_labels) > 1 else plot_w / 2)
            y = _H - _PAD_B - plot_h * value / top
            segment.append(f"{x:.1f},{y:.1f}")
            parts.append(
                f'<circle cx="{x:.1f}" cy="{y:.1f}" r="3" fill="{color}">'
                f"<title>{escape(name)} @ {escape(x_labels[i])}: {_fmt(value)}</title></circle>"
            )
            if len(segment) > 1:
                parts.append(f'<polyline points="{" ".join(segment[-2:])}" fill="none" stroke="{color}"/>')
    names = list(series)
    # The legend's rows below the x labels; the chart grows by the rows past the first.
    parts.append(_legend(names, [PALETTE[k % len(PALETTE)] for k in range(len(names))], x=_PAD_L, y=_H - 6))
    height = _H + (max(1, _legend_rows(names, x=_PAD_L)) - 1) * _LEGEND_ROW
    return _frame("".join(parts), label=label, height=height)
