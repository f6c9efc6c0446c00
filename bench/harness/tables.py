"""Tables a benchmark prints as it goes, or renders as markdown for docs/BENCHMARKS.md."""

from __future__ import annotations


def print_table(headers: list[str], rows: list[list], title: str | None = None) -> None:
    cells = [[str(h) for h in headers]] + [["" if c is None else str(c) for c in row] for row in rows]
    widths = [max(len(row[i]) for row in cells) for i in range(len(headers))]
    if title:
        print(f"\n{title}")
    line = "  ".join(h.ljust(w) for h, w in zip(cells[0], widths))
    print(line)
    print("  ".join("-" * w for w in widths))
    for row in cells[1:]:
        print("  ".join(c.rjust(w) if _numeric(c) else c.ljust(w) for c, w in zip(row, widths)))


def markdown_table(headers: list[str], rows: list[list]) -> list[str]:
    """The lines of a GitHub markdown table, its first column left-aligned and the others right."""
    lines = [
        "| " + " | ".join(headers) + " |",
        "|" + "|".join("---" if i == 0 else "---:" for i in range(len(headers))) + "|",
    ]
    return lines + ["| " + " | ".join(str(cell) for cell in row) + " |" for row in rows]


def _numeric(text: str) -> bool:
    try:
        float(text.replace("%", "").replace("x", ""))
        return True
    except ValueError:
        return False
