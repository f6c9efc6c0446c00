import pytest

from knowledge.chunking import SHORT_PASSAGE_TOKENS, chunk_parents_and_children, chunk_sections
from knowledge.parsing import Section

pytestmark = pytest.mark.slow  # uses the real model's tokenizer


def test_chunks_fit_the_token_budget_and_overlap(embedder):
    sentences = [f"Sentence number {i} explains how the SKY-{10000 + i} hub pairs with a phone." for i in range(60)]
    drafts = chunk_sections(
        [Section(" ".join(sentences))], count_tokens=embedder.count_tokens, chunk_size=64, chunk_overlap=16
    )
    assert len(drafts) > 5
    assert all(draft.token_count <= 64 for draft in drafts)
    assert all(draft.token_count == embedder.count_tokens(draft.text) for draft in drafts)
    # Overlap: each chunk starts with words that ended the previous one.
    for previous, current in zip(drafts, drafts[1:]):
        assert current.text.split()[0] in previous.text.split()[-20:]
    # Nothing is lost: every sentence's product code appears in some chunk.
    joined = " ".join(draft.text for draft in drafts)
    assert all(f"SKY-{10000 + i}" in joined for i in range(60))


def test_chinese_text_splits_at_sentence_ends(embedder):
    text = "".join(f"第{i}条规定说明了退货的具体流程和时限要求。" for i in range(40))
    drafts = chunk_sections([Section(text)], count_tokens=embedder.count_tokens, chunk_size=60, chunk_overlap=0)
    assert len(drafts) > 3
    assert all(draft.text.endswith("。") for draft in drafts)
    assert all(draft.token_count <= 60 for draft in drafts)


def test_sections_are_never_merged_and_keep_their_metadata(embedder):
    sections = [Section(f"问题{i}\n答案{i}", {"question": f"问题{i}", "row": i}) for i in range(5)]
    drafts = chunk_sections(sections, count_tokens=embedder.count_tokens, chunk_size=200, chunk_overlap=20)
    assert [draft.text for draft in drafts] == [section.text for section in sections]
    assert [draft.metadata["row"] for draft in drafts] == list(range(5))


def test_duplicate_chunks_in_a_document_are_dropped(embedder):
    sections = [Section("Same paragraph."), Section("Other paragraph."), Section("Same paragraph.")]
    drafts = chunk_sections(sections, count_tokens=embedder.count_tokens, chunk_size=50, chunk_overlap=0)
    assert [draft.text for draft in drafts] == ["Same paragraph.", "Other paragraph."]


def test_a_title_the_body_does_not_fit_beside_joins_the_first_passage(embedder):
    title = "Lithium battery storage"
    body = " ".join(
        f"Rule {i}: keep the PPR-{9000 + i} pack between 20 and 40 % charge in a cool room." for i in range(30)
    )
    drafts = chunk_sections(
        [Section(f"{title}\n\n{body}")], count_tokens=embedder.count_tokens, chunk_size=120, chunk_overlap=16,
        max_tokens=embedder.max_tokens,
    )  # fmt: skip
    assert len(drafts) > 3
    assert drafts[0].text.startswith(f"{title}\n\nRule 0:")
    assert all(draft.text != title for draft in drafts)
    assert all(draft.token_count < 120 + SHORT_PASSAGE_TOKENS for draft in drafts)
    joined = " ".join(draft.text for draft in drafts)
    assert all(f"PPR-{9000 + i}" in joined for i in range(30))


def test_a_title_stays_alone_when_the_model_cannot_read_it_with_the_next_passage(embedder):
    title = "Battery storage"
    body = " ".join(f"Rule {i}: keep the PPR-{9000 + i} pack half charged." for i in range(40))
    text = f"{title}\n\n{body}"
    common = {"count_tokens": embedder.count_tokens, "chunk_size": 60, "chunk_overlap": 0}
    joined = chunk_sections([Section(text)], max_tokens=200, **common)
    assert joined[0].text.startswith(f"{title}\n\n")
    alone = chunk_sections([Section(text)], max_tokens=joined[0].token_count - 1, **common)
    assert alone[0].text == title
    first_passage = joined[0].text.removeprefix(f"{title}\n\n")
    assert [draft.text for draft in alone[1:]] == [first_passage] + [draft.text for draft in joined[1:]]


def _inside(child, parents) -> bool:
    """The child's text is in its parent's (up to whitespace: a short passage joins the next with a blank line)."""
    return "".join(child.text.split()) in "".join(parents[child.parent].text.split())


def _parent_child(embedder, sections, child_size=48, parent_size=160, overlap=8):
    return chunk_parents_and_children(
        sections, count_tokens=embedder.count_tokens, child_size=child_size, child_overlap=overlap,
        parent_size=parent_size,
    )  # fmt: skip


def test_parents_are_bounded_and_every_child_lies_inside_its_parent(embedder):
    paragraphs = [
        " ".join(f"Paragraph {p} sentence {s} says the SKY-{p}{s:02d} hub pairs over Zigbee." for s in range(8))
        for p in range(6)
    ]
    parents, children = _parent_child(embedder, [Section("\n\n".join(paragraphs), {"section": "Setup"})])
    assert len(parents) >= 3 and len(children) > len(parents)
    assert all(parent.token_count <= 160 for parent in parents)
    assert all(child.token_count <= 48 for child in children)
    assert all(_inside(child, parents) for child in children)
    assert sorted({child.parent for child in children}) == list(range(len(parents)))  # every parent has children
    assert all(child.metadata["section"] == "Setup" == child.metadata["locator"]["section"] for child in children)
    text = "\n\n".join(paragraphs)
    for draft in [*parents, *children]:  # each points at its own text in the section (a parent's first child too)
        start, end = draft.metadata["locator"]["chars"]
        assert text[start:end] == draft.text
    # The parents cover the text once (no overlap): each product code is in exactly one parent.
    for code in ("SKY-000", "SKY-305", "SKY-507"):
        assert sum(code in parent.text for parent in parents) == 1


def test_chinese_parents_and_children_split_at_sentence_ends(embedder):
    text = "".join(f"第{i}条规定说明了退货的具体流程和时限要求。" for i in range(40))
    parents, children = _parent_child(embedder, [Section(text)], child_size=40, parent_size=120, overlap=0)
    assert len(parents) > 2 and len(children) > len(parents)
    assert all(draft.text.endswith("。") for draft in [*parents, *children])
    assert all(parent.token_count <= 120 for parent in parents)
    assert all(_inside(child, parents) for child in children)


def test_a_parent_that_fits_one_child_is_its_only_child(embedder):
    parents, children = _parent_child(embedder, [Section("Short FAQ answer about the warranty.")])
    assert [parent.text for parent in parents] == [child.text for child in children]
    assert children[0].parent == 0
