"""Every reference to a section of the benchmark documents names a heading that exists.

Code and docs cite a section as ``docs/BENCHMARKS.md, "<heading>"`` or ``docs/benchmarks/decisions.md,
"<heading>"`` (the heading, or its first words), and Markdown links as ``BENCHMARKS.md#<anchor>``. A
reference to BENCHMARKS.md may also name a decision, because BENCHMARKS.md links every one of them from
its last section, so a reader who opens it finds the paragraph.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
BENCHMARKS = ROOT / "docs" / "BENCHMARKS.md"
DECISIONS = ROOT / "docs" / "benchmarks" / "decisions.md"
DOCUMENTS = {"BENCHMARKS.md": BENCHMARKS, "benchmarks/decisions.md": DECISIONS, "decisions.md": DECISIONS}

SKIPPED_DIRS = {".git", ".venv", "var", "node_modules", "results", "__pycache__"}
SUFFIXES = {".py", ".md", ".txt", ".html", ".toml", ".yml", ".yaml", ".cfg", ".ini", ".sh", ".js"}

# The document, then a comma, spaces, an opening parenthesis or a comment's "#" (a reference that goes on
# to the next line of a Python comment), then the quoted heading.
NAMED_REFERENCE = re.compile(r'(benchmarks/decisions\.md|BENCHMARKS\.md)[,\s(#]+"([^"]+)"')
ANCHOR_LINK = re.compile(r"(benchmarks/decisions\.md|decisions\.md|BENCHMARKS\.md)#([\w\-]+)")
HEADING = re.compile(r"^(#{1,6}) +(.+?) *$")


def text_files():
    for path in sorted(ROOT.rglob("*")):
        parts = path.relative_to(ROOT).parts
        if any(part in SKIPPED_DIRS for part in parts) or path == Path(__file__).resolve():
            continue
        if path.suffix in SUFFIXES and path.is_file():
            yield path


def headings(document: Path) -> list[tuple[int, str]]:
    """(level, text) of the document's headings, outside fenced code (whose shell comments start with #)."""
    found, fenced = [], False
    for line in document.read_text(encoding="utf-8").splitlines():
        if line.startswith("```"):
            fenced = not fenced
        elif not fenced and (match := HEADING.match(line)):
            found.append((len(match.group(1)), match.group(2)))
    return found


def plain(text: str) -> str:
    return " ".join(text.replace("`", "").split())


def anchor(heading: str) -> str:
    """GitHub's anchor for a heading: lowercase, punctuation dropped (not hyphens or underscores), spaces as hyphens."""
    return re.sub(r"[^\w\- ]", "", plain(heading).lower()).replace(" ", "-")


def anchors(document: Path) -> Iterator[str]:
    seen: dict[str, int] = {}
    for _, text in headings(document):
        slug = anchor(text)
        seen[slug] = seen.get(slug, -1) + 1
        yield slug if seen[slug] == 0 else f"{slug}-{seen[slug]}"


def names_heading(name: str, heading: str) -> bool:
    """A reference names a heading by its whole text or by its first words."""
    name, heading = plain(name), plain(heading)
    return heading == name or (heading.startswith(name) and not heading[len(name)].isalnum())


def decisions_linked_from_benchmarks() -> list[str]:
    linked = {
        slug
        for document, slug in ANCHOR_LINK.findall(BENCHMARKS.read_text(encoding="utf-8"))
        if DOCUMENTS[document] == DECISIONS
    }
    return [text for (_, text), slug in zip(headings(DECISIONS), anchors(DECISIONS)) if slug in linked]


def named_references():
    for path in text_files():
        for match in NAMED_REFERENCE.finditer(path.read_text(encoding="utf-8", errors="replace")):
            # A name that goes on to the next line of a Python comment loses that line's "#".
            name = re.sub(r"\s*\n\s*#?\s*", " ", match.group(2))
            line = match.string.count("\n", 0, match.start()) + 1
            yield f"{path.relative_to(ROOT)}:{line}", match.group(1), name


def test_named_references_point_at_headings():
    targets = {
        "BENCHMARKS.md": [text for _, text in headings(BENCHMARKS)] + decisions_linked_from_benchmarks(),
        "benchmarks/decisions.md": [text for _, text in headings(DECISIONS)],
    }
    references = list(named_references())
    broken = [
        f'{where}: {document}, "{name}"'
        for where, document, name in references
        if not any(names_heading(name, heading) for heading in targets[document])
    ]
    assert len(references) >= 10, "the pattern no longer finds the references the code makes"
    assert not broken, "references to no heading:\n" + "\n".join(broken)


def test_anchor_links_point_at_headings():
    known = {BENCHMARKS: set(anchors(BENCHMARKS)), DECISIONS: set(anchors(DECISIONS))}
    links = [
        (path, document, slug)
        for path in text_files()
        for document, slug in ANCHOR_LINK.findall(path.read_text(encoding="utf-8", errors="replace"))
    ]
    broken = [
        f"{path.relative_to(ROOT)}: {document}#{slug}"
        for path, document, slug in links
        if slug not in known[DOCUMENTS[document]]
    ]
    assert links, "the pattern no longer finds the anchors the docs link"
    assert not broken, "links to no heading:\n" + "\n".join(broken)


def test_benchmarks_links_every_decision():
    decisions = [text for level, text in headings(DECISIONS) if level == 3]
    missing = sorted(set(decisions) - set(decisions_linked_from_benchmarks()))
    assert decisions and not missing, f"decisions BENCHMARKS.md does not link: {missing}"


def test_benchmark_documents_name_no_private_scratch_paths():
    for document in (BENCHMARKS, DECISIONS):
        lines = [
            number
            for number, line in enumerate(document.read_text(encoding="utf-8").splitlines(), 1)
            if "/tmp/" in line
        ]
        assert not lines, f"{document.relative_to(ROOT)} names /tmp/ paths on lines {lines}"
