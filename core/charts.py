"""Server-side SVG charts for the console pages (no JavaScript, no build step): a line chart of values over
points and a bar chart of signed changes. Each mark carries its figure in ``data-value`` (and a
``<title>`` a reader sees on hover), so a test reads back exactly what was drawn."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from html import escape

from django.utils.safestring import SafeString, mark_safe

WIDTH, HEIGHT = 640, 220
LEFT, RIGHT, TOP, BOTTOM = 48, 16, 12, 36


@dataclass(frozen=True)
class Series:
    name: str
    points: Sequence[tuple[float, float]]  # (x, y), x in order
    css_class: str = ""


def _x(value: float, low: float, high: float) -> float:
    span = high - low or 1.0
    return LEFT + (value - low) / span * (WIDTH - LEFT - RIGHT)


def _y(value: float, low: float, high: float) -> float:
    span = high - low or 1.0
    return HEIGHT - BOTTOM - (value - low) / span * (HEIGHT - TOP - BOTTOM)


def _fmt(value: float) -> str:
    return f"{value:.4g}"


def line_chart(
    series: Sequence[Series],
    *,
    chart_id: str,
    title: str,
    x_label: str,
    y_range: tuple[float, float] = (0.0, 1.0),
    x_range: tuple[float, float] | None = None,
    x_ticks: Sequence[tuple[float, str]] = (),
    marker: tuple[float, str] | None = None,
    max_step: float | None = None,
) -> SafeString:
    """Lines with a dot per point (``<circle class="point" data-series data-x data-y>``); ``marker``: a
    vertical rule at an x (``<line class="marker" data-x>``), e.g. a recommended threshold. ``x_range``:
    the x axis's span when it is not the points' (e.g. every day, some of them without a point);
    ``max_step``: points further apart in x are not joined (a gap, e.g. over days without data)."""
    xs = [x for line in series for x, _ in line.points] + ([marker[0]] if marker else [])
    low_x, high_x = x_range or ((min(xs), max(xs)) if xs else (0.0, 1.0))
    low_y, high_y = y_range
    parts = [
        (
            f'<svg id="{escape(chart_id)}" class="chart" role="img" viewBox="0 0 {WIDTH} {HEIGHT}" '
            f'width="{WIDTH}" height="{HEIGHT}" xmlns="http://www.w3.org/2000/svg"><title>{escape(title)}</title>'
        ),
        f'<line class="axis" x1="{LEFT}" y1="{HEIGHT - BOTTOM}" x2="{WIDTH - RIGHT}" y2="{HEIGHT - BOTTOM}" stroke="#999"/>',
        f'<line class="axis" x1="{LEFT}" y1="{TOP}" x2="{LEFT}" y2="{HEIGHT - BOTTOM}" stroke="#999"/>',
    ]
    for tick in (low_y, (low_y + high_y) / 2, high_y):
        y = _y(tick, low_y, high_y)
        parts.append(f'<text x="{LEFT - 6}" y="{y + 4:.1f}" text-anchor="end" font-size="11">{_fmt(tick)}</text>')
    for value, label in x_ticks:
        x = _x(value, low_x, high_x)
        parts.append(
            f'<text x="{x:.1f}" y="{HEIGHT - BOTTOM + 14}" text-anchor="middle" font-size="11">{escape(label)}</text>'
        )
    parts.append(
        f'<text x="{(LEFT + WIDTH - RIGHT) / 2}" y="{HEIGHT - 4}" text-anchor="middle" font-size="12">{escape(x_label)}</text>'
    )
    palette = ("#417690", "#ba2121", "#3a7d44", "#a36f00")
    for index, line in enumerate(series):
        color = palette[index % len(palette)]
        coords = [(_x(x, low_x, high_x), _y(y, low_y, high_y)) for x, y in line.points]
        runs: list[list[tuple[float, float]]] = []  # the points one polyline joins, each
        last_x: float | None = None
        for (value_x, _), coord in zip(line.points, coords, strict=True):
            if last_x is None or (max_step is not None and value_x - last_x > max_step):
                runs.append([])
            runs[-1].append(coord)
            last_x = value_x
        for run in runs:
            if len(run) > 1:
                path = " ".join(f"{x:.1f},{y:.1f}" for x, y in run)
                parts.append(f'<polyline class="line" fill="none" stroke="{color}" stroke-width="2" points="{path}"/>')
        for (x, y), (vx, vy) in zip(coords, line.points, strict=True):
            parts.append(
                f'<circle class="point {escape(line.css_class)}" data-series="{escape(line.name)}" data-x="{vx}" '
                f'data-y="{vy}" cx="{x:.1f}" cy="{y:.1f}" r="3" fill="{color}">'
                f"<title>{escape(line.name)}: {_fmt(vy)} at {_fmt(vx)}</title></circle>"
            )
    if marker is not None:
        x = _x(marker[0], low_x, high_x)
        parts.append(
            f'<line class="marker" data-x="{marker[0]}" x1="{x:.1f}" y1="{TOP}" x2="{x:.1f}" y2="{HEIGHT - BOTTOM}" '
            f'stroke="#a36f00" stroke-dasharray="4 3"><title>{escape(marker[1])}</title></line>'
            + (  # its label on the side with room
                f'<text x="{x - 4:.1f}" y="{TOP + 10}" text-anchor="end" font-size="11" fill="#a36f00">{escape(marker[1])}</text>'
                if x > WIDTH * 0.7
                else f'<text x="{x + 4:.1f}" y="{TOP + 10}" font-size="11" fill="#a36f00">{escape(marker[1])}</text>'
            )
        )
    legend_x = LEFT + 8
    for index, line in enumerate(series):
        color = palette[index % len(palette)]
        parts.append(
            f'<text x="{legend_x}" y="{TOP + 12 + 14 * index}" font-size="11" fill="{color}">{escape(line.name)}</text>'
        )
    parts.append("</svg>")
    return mark_safe("".join(parts))  # every text in it is escaped above


def bar_chart(bars: Sequence[tuple[str, float, str]], *, chart_id: str, title: str, limit: float = 1.0) -> SafeString:
    """One bar per (label, signed value, link): up green, down red, around a zero line; each bar is a
    link (``<a href>``) holding ``<rect class="bar" data-label data-value>``."""
    height = max(HEIGHT, 24 + 14 * len(bars))
    middle = (LEFT + WIDTH - RIGHT) / 2 + 60
    half = (WIDTH - RIGHT - middle) - 4
    parts = [
        (
            f'<svg id="{escape(chart_id)}" class="chart" role="img" viewBox="0 0 {WIDTH} {height}" width="{WIDTH}" '
            f'height="{height}" xmlns="http://www.w3.org/2000/svg"><title>{escape(title)}</title>'
        ),
        f'<line class="axis" x1="{middle}" y1="4" x2="{middle}" y2="{height - 4}" stroke="#999"/>',
    ]
    for index, (label, value, href) in enumerate(bars):
        y = 8 + 14 * index
        length = min(abs(value) / (limit or 1.0), 1.0) * half
        x = middle if value >= 0 else middle - length
        color = "#3a7d44" if value > 0 else "#ba2121" if value < 0 else "#999"
        kind = "win" if value > 0 else "loss" if value < 0 else "tie"
        short = label if len(label) <= 40 else label[:39] + "…"
        parts.append(
            f'<a href="{escape(href)}"><rect class="bar {kind}" data-label="{escape(label)}" data-value="{value}" '
            f'x="{x:.1f}" y="{y}" width="{max(length, 1):.1f}" height="10" fill="{color}">'
            f"<title>{escape(label)}: {value:+.4f}</title></rect>"
            f'<text x="{LEFT - 40}" y="{y + 9}" font-size="10">{escape(short)}</text></a>'
        )
    parts.append("</svg>")
    return mark_safe("".join(parts))  # every text in it is escaped above
