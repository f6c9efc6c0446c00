"""The console's server-side SVG line chart: an x axis wider than its points, and gaps where points are missing."""

import re

from core.charts import Series, line_chart


def polylines(svg: str) -> list[list[tuple[float, float]]]:
    return [
        [tuple(float(n) for n in point.split(",")) for point in points.split()]
        for points in re.findall(r'<polyline class="line"[^>]* points="([^"]+)"', svg)
    ]


def test_points_further_apart_than_the_step_are_not_joined():
    points = [(0.0, 1.0), (1.0, 2.0), (4.0, 3.0), (6.0, 1.0), (7.0, 2.0)]  # no point at 2, 3 and 5
    svg = line_chart([Series("p50 ms", points, "p50")], chart_id="c", title="t", x_label="day", y_range=(0.0, 3.0),
                     x_range=(0.0, 9.0), max_step=1.0)  # fmt: skip
    drawn = re.findall(r'<circle class="point p50" data-series="p50 ms" data-x="([^"]+)" data-y="([^"]+)"', svg)
    assert [(float(x), float(y)) for x, y in drawn] == points  # every point, none made up for a gap
    lines = polylines(svg)
    assert [len(line) for line in lines] == [2, 2]  # 0-1 and 6-7; 4 stands alone
    # x spans 0..9: day 9 (no point) is the right end, so day 7 is 7/9 of the way along
    left, right = 48, 640 - 16
    assert lines[1][1][0] == round(left + 7 / 9 * (right - left), 1)


def test_without_a_step_every_point_is_joined_over_the_points_own_span():
    points = [(2.0, 1.0), (5.0, 2.0), (6.0, 3.0)]
    svg = line_chart([Series("s", points)], chart_id="c", title="t", x_label="x", y_range=(0.0, 3.0))
    (line,) = polylines(svg)
    assert len(line) == 3 and (line[0][0], line[-1][0]) == (48.0, 624.0)
