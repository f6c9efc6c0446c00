"""The protocol for defaults (``evaluate --choose-default``): the even/odd split of query ids, and the
decision on hand-written score tables."""

import pytest

from retrieval.evaluation.protocol import CANDIDATES, CURRENT_DEFAULT, SetScores, choose, half_of, halves

DEFAULT, RIVAL, OTHER = "rrf/own", "relevance/own", "minmax/own"


def test_numeric_ids_split_by_their_parity_others_by_a_stable_hash():
    assert [half_of(qid) for qid in ("0", "2", "13", "1024")] == ["even", "even", "odd", "even"]
    assert half_of(" 7") == "odd"
    # a hash of the id alone: the same on every call and machine, whatever other ids the split holds
    assert half_of("DEV_1_QUERY_0") == half_of("DEV_1_QUERY_0")
    # (the first byte of SHA-256: 0x94, 0xfd, 0xfc, 0x57; "²" is a digit to str.isdigit, not an ASCII number)
    assert [half_of(qid) for qid in ("DEV_1_QUERY_0", "1147-5-1", "56beb86b3aeaaa14008c92bd", "²")] == [
        "even", "odd", "even", "odd"
    ]  # fmt: skip
    ids = [f"q{i}" for i in range(400)]
    split = halves(ids)
    assert (len(split["even"]), len(split["odd"])) == (190, 210)  # the hash spreads ids over both halves
    backwards = halves(reversed(ids))  # a query's half does not depend on the order or the other ids
    assert {half: set(members) for half, members in backwards.items()} == {h: set(m) for h, m in split.items()}
    assert halves(ids[:7])["odd"] == [qid for qid in split["odd"] if qid in ids[:7]]


def table(**runs) -> dict[str, dict[str, float]]:
    """``name=(even, odd)`` -> the nDCG@10 table of one set."""
    return {name.replace("_", "/"): {"even": even, "odd": odd} for name, (even, odd) in runs.items()}


def shares(**runs) -> dict[str, dict[str, float]]:
    return table(**runs)


def sets(scifact=None, other=None, other_shares=None) -> dict[str, SetScores]:
    """SciFact where the rival gains on both halves, and a second set where it ties the default."""
    scifact = scifact or table(
        vector=(0.60, 0.61), bm25=(0.62, 0.63), rrf_own=(0.70, 0.71), relevance_own=(0.72, 0.73),
        minmax_own=(0.71, 0.69),
    )  # fmt: skip
    other = other or table(
        vector=(0.90, 0.90), bm25=(0.95, 0.95), rrf_own=(0.96, 0.96), relevance_own=(0.96, 0.96),
        minmax_own=(0.96, 0.96),
    )  # fmt: skip
    other_shares = other_shares or shares(rrf_own=(0.95, 0.95), relevance_own=(0.96, 0.95), minmax_own=(0.97, 0.97))
    return {
        "scifact/train": SetScores(
            scifact, shares(rrf_own=(0.9, 0.9), relevance_own=(0.9, 0.9), minmax_own=(0.9, 0.9))
        ),
        "other/dev": SetScores(other, other_shares),
    }


def decide(scores):
    return choose([DEFAULT, RIVAL, OTHER], DEFAULT, scores, "scifact/train")


def test_a_candidate_gaining_on_both_halves_within_every_rule_wins():
    decision = decide(sets())
    assert (decision.selected, decision.winner) == (RIVAL, RIVAL)
    failures = {verdict.candidate: verdict.failures for verdict in decision.verdicts}
    assert DEFAULT not in failures  # the default is what the others are measured against
    assert failures[OTHER] == {
        "even": [],
        "odd": ["no gain on scifact/train", "loses more than 0.005 on scifact/train"],
    }


def test_the_selected_candidate_must_be_confirmed_on_the_odd_half():
    scifact = table(
        vector=(0.6, 0.6), bm25=(0.6, 0.6), rrf_own=(0.70, 0.71), relevance_own=(0.75, 0.70), minmax_own=(0.72, 0.72)
    )
    decision = decide(sets(scifact=scifact))
    # the best on the even half is selected; it loses on the odd half, so the default stays (no second pick)
    assert (decision.selected, decision.winner) == (RIVAL, DEFAULT)


def test_a_loss_beyond_the_budget_on_any_set_disqualifies():
    other = table(
        vector=(0.90, 0.90), bm25=(0.90, 0.90), rrf_own=(0.96, 0.96), relevance_own=(0.954, 0.96),
        minmax_own=(0.956, 0.96),
    )  # fmt: skip
    decision = decide(sets(other=other))
    failures = {verdict.candidate: verdict.failures for verdict in decision.verdicts}
    assert failures[RIVAL]["even"] == ["loses more than 0.005 on other/dev"]
    assert failures[OTHER]["even"] == []  # 0.004 below: inside the budget
    assert decision.winner == DEFAULT  # minmax is selected on the even half, and gains nothing on the odd one


def test_hybrid_below_its_best_leg_disqualifies():
    other = table(
        vector=(0.90, 0.90), bm25=(0.962, 0.95), rrf_own=(0.96, 0.96), relevance_own=(0.961, 0.96),
        minmax_own=(0.96, 0.96),
    )  # fmt: skip
    decision = decide(sets(other=other))
    failures = {verdict.candidate: verdict.failures for verdict in decision.verdicts}
    assert "below its best leg on other/dev" in failures[RIVAL]["even"]
    assert decision.winner == DEFAULT


def test_a_threshold_share_under_the_defaults_disqualifies():
    low = shares(rrf_own=(0.95, 0.95), relevance_own=(0.95, 0.949), minmax_own=(0.97, 0.97))
    decision = decide(sets(other_shares=low))
    failures = {verdict.candidate: verdict.failures for verdict in decision.verdicts}
    assert failures[RIVAL] == {"even": [], "odd": ["threshold share below the default's on other/dev"]}
    assert (decision.selected, decision.winner) == (RIVAL, DEFAULT)


def test_the_reference_set_must_be_measured():
    with pytest.raises(ValueError, match="scifact"):
        choose([DEFAULT, RIVAL], DEFAULT, {"other/dev": sets()["other/dev"]}, "scifact/train")


def test_the_candidates_are_every_fusion_with_each_candidate_pool():
    assert set(CANDIDATES) == {f"{f}/{p}" for f in ("rrf", "relevance", "minmax") for p in ("own", "union")}
    assert CURRENT_DEFAULT in CANDIDATES
