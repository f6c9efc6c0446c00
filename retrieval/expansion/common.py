"""Helpers the expanders share: what counts as a Latin word character, and variant deduplication."""

from __future__ import annotations

from retrieval.expansion.base import QueryVariant

# Latin letters (ASCII, Latin-1 and Latin Extended-A/B) and digits, as a regex character-class body.
# Word boundaries are taken against this class rather than ``\w`` so that a Latin word glued to CJK
# text ("wifi密码") still stands alone, while "wifiless" or "café" stay single words.
LATIN_ALNUM = "0-9A-Za-z\u00c0-\u024f"


def top_variants(query: str, variants: list[QueryVariant], limit: int) -> list[QueryVariant]:
    """Case-insensitively distinct variants other than ``query``, highest weight first, at most ``limit``.

    Of duplicates the heaviest wins; equal weights keep the order in which texts first appeared.
    """
    excluded = query.strip().casefold()
    best: dict[str, tuple[int, QueryVariant]] = {}
    for variant in variants:
        key = variant.text.strip().casefold()
        if not key or key == excluded:
            continue
        seen = best.get(key)
        if seen is None:
            best[key] = (len(best), variant)
        elif variant.weight > seen[1].weight:
            best[key] = (seen[0], variant)
    ranked = sorted(best.values(), key=lambda item: (-item[1].weight, item[0]))
    return [variant for _, variant in ranked[: max(limit, 0)]]
