"""The graph's extraction wiring: the entity extractor of a KB's passages (its tenant's protected terms and
synonym groups, its curators' rules) and the LLM's typed relations, as ingestion, a passage's edit, a
rebuild and a curator's edit run them (``knowledge.graph_extraction`` hands them to ingestion)."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING

from django.conf import settings
from django.db.models import QuerySet

from knowledge.models import GraphEntityRule, Synonym
from knowledge.selectors.search import analyzer_for_tenant

if TYPE_CHECKING:
    from engines.graph_extraction import Curation, EntityExtractor
    from engines.llm_triples import TripleExtractor


def entity_extractor_for_tenant(
    tenant_id: int, knowledge_base_id: int | None = None, common: frozenset[str] = frozenset()
) -> EntityExtractor:
    """Graph extraction with the tenant's protected terms; each two-way synonym group is one entity,
    named by its first term (the others are its aliases). For a knowledge base's passages, with its
    curator's rules (``graph_curation``) and without the ``common`` names of its version."""
    from engines.graph_extraction import EntityExtractor

    groups = Synonym.objects.filter(tenant_id=tenant_id, kind=Synonym.Kind.EQUIVALENT, is_active=True)
    aliases = aliases_of(groups.order_by("id").values_list("terms", flat=True))
    curation = None if knowledge_base_id is None else graph_curation([knowledge_base_id])
    return EntityExtractor(analyzer_for_tenant(tenant_id), aliases, curation, common)


def aliases_of(groups: Iterable[Sequence[str]]) -> dict[str, str]:
    """Alias -> entity name (both normalized): each two-way synonym group is one entity, named by its
    first term; the first group naming an alias wins."""
    from engines.analysis import normalize

    aliases: dict[str, str] = {}
    for terms in groups:
        names = [normalize(term) for term in terms]
        for alias in names[1:]:
            aliases.setdefault(alias, names[0])
    return aliases


def graph_curation(knowledge_base_ids: Iterable[int]) -> Curation:
    """The curator's edits of these knowledge bases' graphs (``GraphEntityRule``) as the extraction
    applies them (one query)."""
    return curation_of(GraphEntityRule.objects.filter(knowledge_base_id__in=list(knowledge_base_ids)))


def curation_of(rules: QuerySet[GraphEntityRule]) -> Curation:
    """These rules as the extraction applies them: renames and merges, shown labels, deleted names."""
    from engines.graph_extraction import Curation

    renamed: dict[str, str] = {}
    labels: dict[str, str] = {}
    deleted: set[str] = set()
    for name, action, target, label in rules.order_by("id").values_list("name", "action", "target", "label"):
        if action == GraphEntityRule.Action.DELETE:
            deleted.add(name)
            continue
        if target != name:
            renamed.setdefault(name, target)
        if action == GraphEntityRule.Action.RENAME and label:
            labels.setdefault(target, label)
    return Curation(renamed, labels, frozenset(deleted))


def triple_extractor() -> TripleExtractor | None:
    """Typed relations at ingestion from the LLM (``LLM_URL``) when ``GRAPH_LLM_TRIPLES`` is on, else None."""
    if not (settings.GRAPH_LLM_TRIPLES and settings.LLM_URL):
        return None
    from engines.llm import chat_client
    from engines.llm_triples import TripleExtractor, TripleLimits

    limits = TripleLimits(
        timeout_s=settings.LLM_TIMEOUT_S,
        deadline_s=settings.GRAPH_LLM_DEADLINE_S,
        max_input_chars=settings.GRAPH_LLM_MAX_INPUT_CHARS,
        max_output_tokens=settings.GRAPH_LLM_MAX_OUTPUT_TOKENS,
    )
    return TripleExtractor(
        chat_client, url=settings.LLM_URL, api_key=settings.LLM_API_KEY, model=settings.LLM_MODEL, limits=limits
    )


class KnowledgeBaseExtraction:
    """The extraction that ingestion and a passage's edit run (``knowledge.graph_extraction``)."""

    def entity_extractor(self, tenant_id: int, knowledge_base_id: int) -> EntityExtractor:
        return entity_extractor_for_tenant(tenant_id, knowledge_base_id)

    def triple_extractor(self) -> TripleExtractor | None:
        return triple_extractor()
