"""Plain text, HTML and Markdown: HTML and Markdown are cut at their headings, with the heading path."""

from __future__ import annotations

import re

from bs4 import BeautifulSoup
from bs4.element import PreformattedString
from markdown_it import MarkdownIt

from knowledge.parsing.base import ParseReport, Section, clean_text, decode, one_line

_DROPPED_TAGS = ["head", "script", "style", "noscript", "nav", "header", "footer", "template"]
_PARAGRAPH_TAGS = {"p", "h1", "h2", "h3", "h4", "h5", "h6", "pre", "blockquote", "table"}
_LINE_TAGS = {"div", "li", "tr", "section", "article", "ul", "ol", "dl", "dt", "dd"}
_CELL_TAGS = ["td", "th"]


def _html_title(soup: BeautifulSoup) -> str:
    for tag in (soup.title, soup.find("h1")):
        if tag is not None and (title := one_line(tag.get_text(" "))):
            return title
    return ""


_PARAGRAPH_BREAK = "\n\u2029\n"  # a U+2029 in the source (outside <pre>) is folded to a space first


def _html_text(soup: BeautifulSoup) -> str:
    """Text with block elements on their own lines and paragraphs separated by blank lines.

    Source whitespace is collapsed first (except inside <pre>) so that only the markers
    inserted here decide where lines break; whitespace-only lines between blocks are then
    dropped and paragraph markers become blank lines. Mutates ``soup``; take the title
    beforehand. The <head> is dropped too: its <title> is reported as the document title.
    """
    for tag in soup.find_all(_DROPPED_TAGS):
        tag.decompose()
    for string in soup.find_all(string=True):
        if isinstance(string, PreformattedString):  # comments, doctype, processing instructions
            string.extract()
        elif string.find_parent("pre") is None:
            string.replace_with(re.sub(r"\s+", " ", string))
    for tag in soup.find_all(True):
        if tag.name == "br":
            tag.replace_with("\n")
        elif tag.name in _PARAGRAPH_TAGS:
            tag.insert_before(_PARAGRAPH_BREAK)
            tag.insert_after(_PARAGRAPH_BREAK)
        elif tag.name in _LINE_TAGS:
            tag.insert_before("\n")
            tag.insert_after("\n")
        elif tag.name in _CELL_TAGS and tag.find_next_sibling(_CELL_TAGS) is not None:
            tag.insert_after(" | ")
    lines = (line.strip(" \t") for line in soup.get_text().split("\n"))
    return clean_text("\n".join(line for line in lines if line).replace("\u2029", ""))


_HEADING_TAGS = ["h1", "h2", "h3", "h4", "h5", "h6"]
# Where the n-th heading starts its section: private-use characters, which no cleanup step touches.
_SECTION_MARK = re.compile("\n*\ue000(\\d+)\ue001\n*")


def _parse_html_markup(markup: str) -> tuple[str, list[Section]]:
    """One section per heading (and one for any text before the first), each with its heading path."""
    soup = BeautifulSoup(markup, "lxml")
    title = _html_title(soup)
    headings = []
    for number, tag in enumerate(soup.find_all(_HEADING_TAGS)):
        headings.append((int(tag.name[1]), one_line(tag.get_text(" "))))
        tag.insert_before(f"\ue000{number}\ue001")  # dropped with the heading when it sits in a <nav>
    return title, _sections_by_heading(_html_text(soup), headings, title)


def _sections_by_heading(text: str, headings: list[tuple[int, str]], title: str) -> list[Section]:
    """``text`` cut at its heading marks. A section's path is the headings above it, each the last one
    of a higher level, and its own; the title leads no path (every chunk is read with it already). A
    heading with no text of its own before the next one is no section: it lives on in the paths."""
    pieces = _SECTION_MARK.split(text)
    sections = [Section(pieces[0].strip())] if pieces[0].strip() else []
    path: list[tuple[int, str]] = []
    for number, body in zip(pieces[1::2], pieces[2::2]):
        level, heading = headings[int(number)]
        path = [(above, name) for above, name in path if above < level] + [(level, heading)]
        body = body.strip()
        if not body or body == heading:
            continue
        names = [name for _, name in path if name]
        if names and names[0] == title:
            names = names[1:]
        sections.append(Section(body, {"section": " > ".join(names)} if names else {}))
    return sections


def parse_html(raw: bytes, report: ParseReport) -> tuple[str, list[Section]]:
    return _parse_html_markup(decode(raw))


_MARKDOWN = MarkdownIt("commonmark").enable(["table", "strikethrough"])


def parse_markdown(raw: bytes, report: ParseReport) -> tuple[str, list[Section]]:
    """Rendering to HTML first reuses the HTML text rules and drops Markdown syntax reliably."""
    return _parse_html_markup(_MARKDOWN.render(decode(raw)))


def parse_txt(raw: bytes, report: ParseReport) -> tuple[str, list[Section]]:
    return "", [Section(clean_text(decode(raw)))]
