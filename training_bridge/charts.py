"""Small server-rendered SVG line charts for the run pages (no JavaScript, no CDN)."""

from __future__ import annotations

from collections.abc import Sequence

from django.utils.html import escape
from django.utils.safestring import SafeString, mark_safe

WIDTH, HEIGHT = 520, 220
LEFT, RIGHT, TOP, BOTTOM = 56, 16, 24, 36
COLOURS = ("#2563eb", "#dc2626", "#059669", "#7c3aed", "#d97706", "#0891b2")


def _ticks(low: float, high: float, count: int = 4) -> list[float]:
    if high == low:
        return [low]
    step = (high - low) / count
    return [low + step * i for i in range(count + 1)]


def _label(value: float) -> str:
    if abs(value) >= 100 or value == int(value):
        return f"{value:.0f}"
    return f"{value:.3g}"


def _text(x: str, y: str, content: str, *, anchor: str, more: str = "") -> str:
    """An 11-pixel label at (x, y) as written; `content` already escaped, `more` attributes."""
    return f'<text x="{x}" y="{y}" font-size="11" text-anchor="{anchor}"{more}>{content}</text>'


def line_chart(
    series: Sequence[tuple[str, Sequence[tuple[float, float]]]],
    *,
    title: str,
    x_label: str,
    y_label: str,
    max_points: int = 400,
) -> SafeString:
    """An SVG with one polyline per (name, points) series; empty series are skipped."""
    drawn = [(name, list(points)) for name, points in series if points]
    if not drawn:
        return mark_safe(f'<p class="muted">{escape(title)}: no points yet.</p>')
    xs = [x for _, points in drawn for x, _ in points]
    ys = [y for _, points in drawn for _, y in points]
    x_low, x_high = min(xs), max(xs)
    y_low, y_high = min(ys), max(ys)
    if y_high == y_low:
        y_low, y_high = y_low - 0.5, y_high + 0.5
    if x_high == x_low:
        x_high = x_low + 1
    plot_w, plot_h = WIDTH - LEFT - RIGHT, HEIGHT - TOP - BOTTOM

    def sx(x: float) -> float:
        return LEFT + (x - x_low) / (x_high - x_low) * plot_w

    def sy(y: float) -> float:
        return TOP + (1 - (y - y_low) / (y_high - y_low)) * plot_h

    parts = [
        f'<svg class="chart" role="img" viewBox="0 0 {WIDTH} {HEIGHT}" width="{WIDTH}" '
        f'height="{HEIGHT}" xmlns="http://www.w3.org/2000/svg">',
        f"<title>{escape(title)}</title>",
        f'<text x="{LEFT}" y="16" font-size="13" font-weight="bold">{escape(title)}</text>',
        f'<rect x="{LEFT}" y="{TOP}" width="{plot_w}" height="{plot_h}" fill="none" stroke="#ccc"/>',
    ]
    for value in _ticks(y_low, y_high):
        y = sy(value)
        parts.append(
            f'<line x1="{LEFT}" x2="{LEFT + plot_w}" y1="{y:.1f}" y2="{y:.1f}" stroke="#eee"/>'
        )
        parts.append(_text(f"{LEFT - 6}", f"{y + 4:.1f}", _label(value), anchor="end"))
    for value in _ticks(x_low, x_high):
        x = sx(value)
        parts.append(_text(f"{x:.1f}", f"{TOP + plot_h + 14}", _label(value), anchor="middle"))
    parts.append(
        _text(f"{LEFT + plot_w / 2:.0f}", f"{HEIGHT - 4}", escape(x_label), anchor="middle")
    )
    middle = f"{TOP + plot_h / 2:.0f}"
    rotated = f' transform="rotate(-90 12 {middle})"'
    parts.append(_text("12", middle, escape(y_label), anchor="middle", more=rotated))
    for index, (name, points) in enumerate(drawn):
        colour = COLOURS[index % len(COLOURS)]
        if len(points) > max_points:  # thin long Phase 2 curves evenly, keeping the last point
            stride = len(points) / max_points
            points = [points[int(i * stride)] for i in range(max_points)] + [points[-1]]
        path = " ".join(f"{sx(x):.1f},{sy(y):.1f}" for x, y in points)
        parts.append(
            f'<polyline fill="none" stroke="{colour}" stroke-width="2" points="{path}">'
            f"<title>{escape(name)}</title></polyline>"
        )
        if len(points) == 1:
            x, y = points[0]
            parts.append(f'<circle cx="{sx(x):.1f}" cy="{sy(y):.1f}" r="3" fill="{colour}"/>')
        legend_y = f"{TOP + 14 + 14 * index}"
        fill = f' fill="{colour}"'
        parts.append(_text(f"{LEFT + plot_w - 4}", legend_y, escape(name), anchor="end", more=fill))
    parts.append("</svg>")
    return mark_safe("".join(parts))
