"""Server-rendered SVG charts for the curator dashboard (no JavaScript, no CDN).

Each function returns a complete `<svg>` element as safe markup with a `<title>` and `<desc>`, so a
screen reader announces what the picture shows; the numbers are also in the element's `<title>`
tooltips per bar/point.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from datetime import datetime
from html import escape

from django.utils.safestring import SafeString, mark_safe

_IDENTIFIERS = itertools.count(1)
PALETTE = ("#2b59c3", "#e07a1f", "#2e9e5b", "#b42318", "#7a4cc2", "#5b6575")


def _svg(width: int, height: int, title: str, description: str, body: list[str]) -> SafeString:
    identifier = f"chart-{next(_IDENTIFIERS)}"
    # Every text placed in the markup was escaped by the callers above.
    return mark_safe(
        f'<svg xmlns="http://www.w3.org/2000/svg" class="chart" role="img" '
        f'viewBox="0 0 {width} {height}" width="100%" preserveAspectRatio="xMidYMid meet" '
        f'aria-labelledby="{identifier}-t {identifier}-d">'
        f'<title id="{identifier}-t">{escape(title)}</title>'
        f'<desc id="{identifier}-d">{escape(description)}</desc>' + "".join(body) + "</svg>"
    )


def _number(value: float) -> str:
    if abs(value - round(value)) < 1e-9:
        return str(int(round(value)))
    return f"{value:.2f}"


def bar_chart(
    values: Sequence[tuple[str, float]],
    *,
    title: str,
    width: int = 360,
    height: int = 180,
    color: str = PALETTE[0],
    label_every: int = 1,
    overlay: Sequence[float] | None = None,
    overlay_color: str = PALETTE[5],
    legend: tuple[str, str] | None = None,
) -> SafeString:
    """Vertical bars; `overlay` draws a second, thinner bar per category behind the first
    (e.g. all judgments behind kept ones)."""
    left, right, top, bottom = 36, 8, 18 if legend else 8, 28
    plot_width, plot_height = width - left - right, height - top - bottom
    top_value = max([value for _, value in values] + list(overlay or []) + [1])
    step = plot_width / max(len(values), 1)
    body = [
        f'<line x1="{left}" y1="{top + plot_height}" x2="{width - right}" '
        f'y2="{top + plot_height}" stroke="#98a2b3"/>',
        f'<text x="{left - 4}" y="{top + 4}" font-size="10" text-anchor="end" '
        f'fill="#5b6575">{_number(top_value)}</text>',
        f'<text x="{left - 4}" y="{top + plot_height}" font-size="10" text-anchor="end" '
        f'fill="#5b6575">0</text>',
    ]
    for index, (label, value) in enumerate(values):
        x = left + index * step
        if overlay is not None:
            behind = overlay[index]
            bar = plot_height * behind / top_value
            body.append(
                f'<rect x="{x + step * 0.1:.1f}" y="{top + plot_height - bar:.1f}" '
                f'width="{step * 0.8:.1f}" height="{bar:.1f}" fill="{overlay_color}" '
                f'opacity="0.35"><title>{escape(label)}: {_number(behind)}</title></rect>'
            )
        bar = plot_height * value / top_value
        body.append(
            f'<rect x="{x + step * 0.22:.1f}" y="{top + plot_height - bar:.1f}" '
            f'width="{step * 0.56:.1f}" height="{bar:.1f}" fill="{color}">'
            f"<title>{escape(label)}: {_number(value)}</title></rect>"
        )
        if index % max(label_every, 1) == 0:
            body.append(
                f'<text x="{x + step / 2:.1f}" y="{height - 12}" font-size="10" '
                f'text-anchor="middle" fill="#1d2430">{escape(label)}</text>'
            )
    if legend:
        body.append(
            f'<rect x="{left}" y="3" width="10" height="10" fill="{color}"/>'
            f'<text x="{left + 14}" y="12" font-size="10">{escape(legend[0])}</text>'
            f'<rect x="{left + 90}" y="3" width="10" height="10" fill="{overlay_color}" '
            f'opacity="0.35"/><text x="{left + 104}" y="12" font-size="10">'
            f"{escape(legend[1])}</text>"
        )
    description = ", ".join(f"{label}: {_number(value)}" for label, value in values)
    return _svg(width, height, title, description, body)


def line_chart(
    series: dict[str, Sequence[tuple[datetime, float | None]]],
    *,
    title: str,
    low: float = 0.0,
    high: float = 1.0,
    width: int = 520,
    height: int = 200,
    empty_message: str = "No history yet — run QC to record one.",
) -> SafeString:
    """Lines over time (x: time, y: low..high), one per series, with a legend; `empty_message`
    says why when no point has a value."""
    left, right, top, bottom = 36, 10, 22, 24
    plot_width, plot_height = width - left - right, height - top - bottom
    moments = [
        moment for points in series.values() for moment, value in points if value is not None
    ]
    body: list[str] = []
    for fraction in (0.0, 0.5, 1.0):
        y = top + plot_height * (1 - fraction)
        body.append(
            f'<line x1="{left}" y1="{y:.1f}" x2="{width - right}" y2="{y:.1f}" '
            f'stroke="#d8dde6"/><text x="{left - 4}" y="{y + 3:.1f}" font-size="10" '
            f'text-anchor="end" fill="#5b6575">{_number(low + (high - low) * fraction)}</text>'
        )
    if not moments:
        body.append(
            f'<text x="{width / 2}" y="{height / 2}" font-size="12" text-anchor="middle" '
            f'fill="#5b6575">{escape(empty_message)}</text>'
        )
        return _svg(width, height, title, "no data", body)
    start, end = min(moments), max(moments)
    span = (end - start).total_seconds() or 1.0

    def position(moment: datetime, value: float) -> tuple[float, float]:
        x = left + plot_width * ((moment - start).total_seconds() / span if end != start else 0.5)
        clipped = min(max(value, low), high)
        y = top + plot_height * (1 - (clipped - low) / ((high - low) or 1))
        return x, y

    descriptions = []
    for index, (name, points) in enumerate(series.items()):
        color = PALETTE[index % len(PALETTE)]
        coordinates = [
            (position(moment, value), moment, value)
            for moment, value in points
            if value is not None
        ]
        if not coordinates:
            continue
        path = " ".join(f"{x:.1f},{y:.1f}" for (x, y), _, _ in coordinates)
        body.append(f'<polyline points="{path}" fill="none" stroke="{color}" stroke-width="2"/>')
        for (x, y), moment, value in coordinates:
            body.append(
                f'<circle cx="{x:.1f}" cy="{y:.1f}" r="3" fill="{color}"><title>{escape(name)} '
                f"{moment:%Y-%m-%d %H:%M}: {value:.3f}</title></circle>"
            )
        body.append(
            f'<rect x="{left + index * 130}" y="5" width="10" height="10" fill="{color}"/>'
            f'<text x="{left + index * 130 + 14}" y="14" font-size="10">{escape(name)}</text>'
        )
        descriptions.append(f"{name}: latest {coordinates[-1][2]:.3f}")
    body.append(
        f'<text x="{left}" y="{height - 6}" font-size="10" fill="#5b6575">{start:%Y-%m-%d}</text>'
        f'<text x="{width - right}" y="{height - 6}" font-size="10" text-anchor="end" '
        f'fill="#5b6575">{end:%Y-%m-%d %H:%M}</text>'
    )
    return _svg(width, height, title, "; ".join(descriptions), body)


def horizontal_bars(
    values: Sequence[tuple[str, float | None]],
    *,
    title: str,
    low: float = 1.0,
    high: float = 5.0,
    width: int = 520,
    row_height: int = 22,
) -> SafeString:
    """One horizontal bar per label on a low..high scale (the leaderboard)."""
    left, right, top = 170, 40, 6
    height = top * 2 + row_height * max(len(values), 1)
    plot_width = width - left - right
    body: list[str] = []
    for index, (label, value) in enumerate(values):
        y = top + index * row_height
        body.append(
            f'<text x="{left - 6}" y="{y + row_height * 0.65:.1f}" font-size="11" '
            f'text-anchor="end">{escape(label[:28])}</text>'
        )
        if value is None:
            continue
        length = plot_width * (min(max(value, low), high) - low) / ((high - low) or 1)
        body.append(
            f'<rect x="{left}" y="{y + 3}" width="{length:.1f}" height="{row_height - 6}" '
            f'fill="{PALETTE[0]}"><title>{escape(label)}: {value:.3f}</title></rect>'
            f'<text x="{left + length + 4:.1f}" y="{y + row_height * 0.65:.1f}" font-size="10">'
            f"{value:.2f}</text>"
        )
    description = ", ".join(
        f"{label}: {'n/a' if value is None else f'{value:.2f}'}" for label, value in values
    )
    return _svg(width, height, title, description, body)
