"""The README and docs/ tell the truth: every relative link and anchor leads somewhere, the README maps
every document, and the README's "Try it" examples, run with curl against the live service holding the
sample knowledge base (as ``./run serve`` leaves it), answer what their comments say."""

from __future__ import annotations

import io
import json
import os
import re
import shlex
import subprocess
from pathlib import Path

import pytest
from django.core.management import call_command

ROOT = Path(__file__).resolve().parent.parent
README = ROOT / "README.md"
DOCUMENTS = [README, *sorted((ROOT / "docs").rglob("*.md"))]
LINK = re.compile(r"!?\[[^\]]*\]\(([^)\s]+)\)")
SERVED_AT = "http://127.0.0.1:8000"


def prose(text: str) -> str:
    """``text`` without code: fenced blocks and inline spans hold examples, not links."""
    return re.sub(r"`[^`\n]*`", "", re.sub(r"^```.*?^```", "", text, flags=re.S | re.M))


def anchors(path: Path) -> set[str]:
    """The anchors GitHub gives the headings of ``path``: lower case, punctuation dropped, spaces to
    hyphens, a repeated heading suffixed -1, -2, ..."""
    seen: dict[str, int] = {}
    for heading in re.findall(r"^#{1,6} +(.+?) *#*$", prose(path.read_text(encoding="utf-8")), re.M):
        slug = re.sub(r"[^\w\- ]", "", heading.replace("`", "").lower()).replace(" ", "-")
        count = seen.get(slug, 0)
        seen[slug] = count + 1
        if count:
            seen[f"{slug}-{count}"] = 1
    return set(seen)


def broken_links(path: Path) -> list[str]:
    broken = []
    for target in LINK.findall(prose(path.read_text(encoding="utf-8"))):
        if re.match(r"[a-z]+:", target):
            continue  # http(s), mailto: another site's business
        file, _, anchor = target.partition("#")
        linked = (path.parent / file).resolve() if file else path
        if not linked.exists():
            broken.append(f"{target}: no such file")
        elif anchor and (linked.suffix != ".md" or anchor not in anchors(linked)):
            broken.append(f"{target}: no such heading")
    return broken


@pytest.mark.parametrize("path", DOCUMENTS, ids=lambda path: str(path.relative_to(ROOT)))
def test_every_relative_link_and_anchor_resolves(path):
    assert broken_links(path) == []


def test_the_anchor_rules_are_githubs():
    headings = ROOT / "docs" / "api.md"
    assert {"caching-rate-limits-idempotency", "endpoints-and-request-body"} <= anchors(headings)
    assert "caching,-rate-limits,-idempotency" not in anchors(headings)


def test_the_readme_maps_every_document():
    targets = LINK.findall(prose(README.read_text()))
    linked = {(README.parent / target.partition("#")[0]).resolve() for target in targets}
    assert [path.name for path in sorted((ROOT / "docs").glob("*.md")) if path.resolve() not in linked] == []


# This project's own history is no reference a reader can follow: "session 12", "issue 27", "items 2 and 3",
# "#27". Say the thing instead (a date, a section, the setting). Another project's tracker may be cited with
# the project named right before it ("Dify #1234", "RAGFlow issue 5452") or as a link to its issue.
HISTORY = re.compile(r"\b(?:sessions?|issues?|items?)\s+#?\d+|(?<![\w&/])#\d+\b", re.I)
PEER_ISSUE = re.compile(r"\b[A-Z][\w.-]+\s+(?:(?:issue|PR|pull request)\s+#?\d+|#\d+)|https?://\S+")


def history_references(text: str) -> list[str]:
    found = []
    for number, line in enumerate(text.splitlines(), 1):
        cited = [match.span() for match in PEER_ISSUE.finditer(line)]
        for match in HISTORY.finditer(line):
            if not any(start <= match.start() and match.end() <= end for start, end in cited):
                found.append(f"{number}: {match.group()}")
    return found


def test_the_history_rule_tells_ours_from_peers():
    assert history_references("since session 12; issue 27's goal; items 2 and 3; see #27") == [
        "1: session 12", "1: issue 27", "1: items 2", "1: #27",
    ]  # fmt: skip
    assert history_references("Dify #1234, RAGFlow issue 5452, https://github.com/x/y/issues/9, &#39;") == []


@pytest.mark.parametrize("path", DOCUMENTS, ids=lambda path: str(path.relative_to(ROOT)))
def test_no_user_doc_refers_to_sessions_issues_or_items(path):
    assert history_references(path.read_text(encoding="utf-8")) == []


def test_the_readme_starts_with_the_two_commands():
    first_block = re.search(r"```bash\n(.*?)```", README.read_text(), re.S).group(1)
    assert [line.split()[0:2] for line in first_block.splitlines()] == [["./run", "serve"], ["./run", "test"]]


# --- the README's "Try it" examples against the live service ----------------------------------------


def try_it_examples() -> list[tuple[str, str]]:
    """(comment, command) of each example of the README's "Try it" block."""
    block = re.search(r"^## Try it\n\n```bash\n(.*?)^```", README.read_text(), re.S | re.M).group(1)
    examples = []
    for example in block.strip().split("\n\n"):
        lines = example.splitlines()
        comment = " ".join(line.lstrip("# ") for line in lines if line.startswith("#"))
        examples.append((comment, "\n".join(line for line in lines if not line.startswith("#"))))
    return examples


def documented_response() -> dict:
    """The response the README shows below its examples (a JSON block with ``"..."`` elisions)."""
    return json.loads(re.search(r"^A response .*?```json\n(.*?)^```", README.read_text(), re.S | re.M).group(1))


def request_body(command: str) -> dict:
    words = shlex.split(command.replace("\\\n", " "))
    return json.loads(words[words.index("-d") + 1])


def source(hit: dict) -> str:
    return Path(hit["source_uri"]).name


@pytest.fixture
def demo(live_server, embedder) -> tuple[str, str]:
    """(base URL, API key) of the live service set up as ``./run serve`` does: ``manage.py load_sample``."""
    printed = io.StringIO()
    call_command("load_sample", base_url=live_server.url, stdout=printed, stderr=io.StringIO())
    return live_server.url, re.search(r"^export API_KEY=(\S+)$", printed.getvalue(), re.M).group(1)


def run_example(command: str, url: str, key: str) -> tuple[int, dict]:
    """The example's own curl command, at the live server's address; (status, JSON body)."""
    assert SERVED_AT in command
    result = subprocess.run(
        ["bash", "-c", command.replace(SERVED_AT, url) + " --write-out '\\n%{http_code}'"],
        env={**os.environ, "API_KEY": key}, capture_output=True, text=True, timeout=120, check=True,
    )  # fmt: skip
    body, status = result.stdout.rsplit("\n", 1)
    return int(status), json.loads(body)


def check_hybrid(comment, body, status, answer, ask):
    documented = documented_response()
    assert status == 200 and answer["mode"] == "hybrid" and len(answer["results"]) == body["top_k"]
    first, shown = answer["results"][0], documented["results"][0]
    assert source(first) == source(shown)  # the response shown is this one's
    assert set(answer) == set(documented) and set(first) == set(shown)
    assert set(first["retrievers"]) == {"bm25", "vector"}
    # its numbers too: the fusion's scale (issue 51: RRF's 0.0327 was shown long after min-max fusion)
    assert first["score"] == pytest.approx(shown["score"], rel=0.01) and first["fused_score"] == first["score"]
    assert first["relevance"] == pytest.approx(shown["relevance"], abs=0.01)
    for leg in ("bm25", "vector"):
        assert first["retrievers"][leg]["rank"] == shown["retrievers"][leg]["rank"]
        assert first["retrievers"][leg]["score"] == pytest.approx(shown["retrievers"][leg]["score"], rel=0.01)


def check_bm25(comment, body, status, answer, ask):
    identifier = re.search(r"[A-Z]+-\d{4}-\d{6}", body["query"]).group()
    assert status == 200 and answer["mode"] == "bm25"
    assert identifier in answer["results"][0]["content"]  # found exactly
    assert "embed" not in answer["timings_ms"]  # no embedding model
    assert all(set(hit["retrievers"]) == {"bm25"} for hit in answer["results"])


def check_filtered_vector(comment, body, status, answer, ask):
    doc_types, shop_id = body["filters"]["doc_type"]["in"], body["filters"]["metadata.shop_id"]
    assert status == 200 and answer["mode"] == "vector" and 0 < len(answer["results"]) <= body["top_k"]
    assert all(hit["doc_type"] in doc_types and hit["metadata"]["shop_id"] == shop_id for hit in answer["results"])


def check_search(comment, body, status, answer, ask):
    assert status == 200 and answer["mode"] == body["mode"] and 0 < len(answer["results"]) <= body["top_k"]
    assert {name: answer["weights"][name] for name in body["weights"]} == body["weights"]
    assert answer["reranked"] is False and answer["queries"][0]["origin"] == "original"


def check_graph(comment, body, status, answer, ask):
    example_path = json.loads(re.search(r"e\.g\. (\[.*?\])", comment).group(1))
    assert status == 200 and answer["mode"] == "graph" and 0 < len(answer["results"]) <= body["top_k"]
    paths = [hit["retrievers"]["graph"]["path"] for hit in answer["results"]]
    assert example_path in paths
    assert all(body["query"] in hit["retrievers"]["graph"]["entities"] for hit in answer["results"])


def check_three_way(comment, body, status, answer, ask):
    """The comment's claims, against the same request without ``"graph": true`` (two-way)."""
    head = int(re.search(r"the top (\d+) stays two-way's", comment).group(1))
    entity = re.search(r'bridge through "(.*?)"', comment).group(1)
    document = re.search(r"FAQ answer \((.*?)\)", comment).group(1)
    assert status == 200 and answer["mode"] == "hybrid"
    assert answer["weights"]["graph"] == float(re.search(r"SEARCH_WEIGHT_GRAPH_HYBRID \(([0-9.]+)\)", comment).group(1))
    two_way_body = {name: value for name, value in body.items() if name != "graph"}
    two_way_status, two_way = ask(two_way_body)
    assert two_way_status == 200 and two_way["weights"]["graph"] == 0.0
    assert len(two_way["results"]) == body["top_k"]
    chunk_ids = [hit["chunk_id"] for hit in answer["results"]]
    assert chunk_ids[:head] == [hit["chunk_id"] for hit in two_way["results"]][:head]  # the top stays two-way's
    bridged = [hit for hit in answer["results"] if (hit["retrievers"].get("graph") or {}).get("bridge")]
    two_way_ids = {hit["chunk_id"] for hit in two_way["results"]}
    placed = [hit for hit in bridged if hit["chunk_id"] not in two_way_ids or hit["rank"] in (8, 9)]
    # the graph places bridges at 8-9; a bridge the other legs rank anyway keeps the rank they give it
    assert placed and all(hit["rank"] in (8, 9) for hit in placed) and len(placed) <= 2
    [added] = [hit for hit in bridged if hit["retrievers"]["graph"]["bridge"]["entity"] == entity]
    assert source(added) == document and entity in added["content"]
    assert added["chunk_id"] not in {hit["chunk_id"] for hit in two_way["results"]}  # what the graph adds
    # the graph adds below the other legs' heads: none of its own passages ranks above the head
    graph_only = [hit["rank"] for hit in answer["results"] if set(hit["retrievers"]) == {"graph"}]
    assert all(rank > head for rank in graph_only)


def check_error(comment, body, status, answer, ask):
    stated = int(re.search(r"here: (\d{3})", comment).group(1))
    assert status == stated and answer["error"]["code"] == "invalid_filter"
    assert "colour" in answer["error"]["message"] and answer["error"]["request_id"]


CHECKS = {  # the first words of each example's comment: the check of what the comment says
    "Hybrid search:": check_hybrid,
    "Keyword search finds identifiers exactly": check_bm25,
    "Dense (vector) search, pre-filtered": check_filtered_vector,
    "One endpoint for every mode": check_search,
    "Graph search:": check_graph,
    "Three-way hybrid:": check_three_way,
    "Errors are JSON": check_error,
}


@pytest.mark.slow
def test_the_readmes_try_it_examples_answer_what_they_say(demo):
    url, key = demo
    examples = try_it_examples()
    assert len(examples) == len(CHECKS)
    failures = []
    for comment, command in examples:
        [check] = [check for start, check in CHECKS.items() if comment.startswith(start)]
        status, answer = run_example(command, url, key)

        def ask(body: dict, command: str = command) -> tuple[int, dict]:
            """The same example with another body (in its single quotes, as the README writes it)."""
            other = re.sub(r"-d '.*?'", lambda _: f"-d '{json.dumps(body, ensure_ascii=False)}'", command, flags=re.S)
            return run_example(other, url, key)

        try:
            check(comment, request_body(command), status, answer, ask)
        except AssertionError as error:
            failures.append(f"{comment[:60]}...: {error}\n{json.dumps(answer, ensure_ascii=False)[:2000]}")
    assert failures == []
