import pytest

from knowledge.chunking import SHORT_PASSAGE_TOKENS, chunk_sections
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
