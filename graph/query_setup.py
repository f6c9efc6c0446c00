"""What the graph leg applies to a query (a hot-path read): the tenant's query-side extractor and the
searched KBs' curation, cached per stamp so a search reads it in one small query, or none."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from functools import lru_cache
from typing import TYPE_CHECKING

from engines.database import read_connection
from graph.extraction import aliases_of, curation_of
from knowledge.models import GraphEntityRule, KnowledgeBase, KnowledgeBaseVersion, Synonym, current_graph_extractor
from knowledge.selectors.search import SearchedKnowledge, tenant_vocabulary
from tenants.models import Tenant

if TYPE_CHECKING:
    from engines.graph_extraction import Curation, EntityExtractor

# Tenants (and version sets) whose query-side graph setup one process keeps; the least recent go first.
GRAPH_SETUP_CACHE_SIZE = 1024


@dataclass(frozen=True)
class GraphQuerySetup:
    """What the graph leg applies to a query of these versions."""

    extractor: EntityExtractor  # the tenant's protected terms and synonym groups, no KB's curation
    curation: Curation  # the curators' edits of the searched KBs: a merged or renamed name finds its entity
    other_extractors: dict[int, str]  # version id -> the extractor that built its graph, if not the service's


def graph_setup_of(tenant_id: int, knowledge: SearchedKnowledge) -> GraphQuerySetup:
    """The setup for a search's versions, from what the search read already (no query once cached)."""
    versions = [(version.version_id, version.revision, version.graph_extractor) for version in knowledge.versions]
    return _setup(tenant_id, knowledge.vocabulary_stamp, versions)


def graph_query_setup(tenant_id: int, version_ids: Iterable[int]) -> GraphQuerySetup:
    """The setup for these versions of the tenant, their stamps read in one query."""
    with read_connection().cursor() as cursor:  # a search's reads: maybe a replica's
        cursor.execute(_GRAPH_STAMPS_SQL, [list(version_ids), tenant_id])
        rows = cursor.fetchall()
    versions = [(version_id, revision, built_by) for _, version_id, revision, built_by in rows if version_id]
    return _setup(tenant_id, rows[0][0] if rows else 0, versions)


def _setup(tenant_id: int, vocabulary_stamp: int, versions: list[tuple[int, int, str]]) -> GraphQuerySetup:
    """From the stamps (the tenant's vocabulary stamp; each version's id, revision and graph extractor):
    the extractor and the curation are built once per stamp and process. A curator's edit moves its
    KB's revisions (``graph.signals``), a vocabulary edit the tenant's stamp."""
    current = current_graph_extractor()
    return GraphQuerySetup(
        _query_extractor(tenant_id, vocabulary_stamp),
        _curation_at(tuple(sorted((version_id, revision) for version_id, revision, _ in versions))),
        {version_id: built_by for version_id, _, built_by in versions if built_by != current},
    )


# One row per searched version of the tenant, or one row of NULLs after the tenant's stamp when none is.
_GRAPH_STAMPS_SQL = (
    f"SELECT t.vocabulary_stamp, v.id, v.revision, v.graph_extractor FROM {Tenant._meta.db_table} t "
    f"LEFT JOIN ({KnowledgeBase._meta.db_table} kb JOIN {KnowledgeBaseVersion._meta.db_table} v "
    "ON v.knowledge_base_id = kb.id AND v.id = ANY(%s::bigint[])) ON kb.tenant_id = t.id WHERE t.id = %s"
)


@lru_cache(maxsize=GRAPH_SETUP_CACHE_SIZE)
def _query_extractor(tenant_id: int, vocabulary_stamp: int) -> EntityExtractor:
    """The tenant's query-side extractor at ``vocabulary_stamp``, from the vocabulary a search has
    cached already (``tenant_vocabulary``)."""
    from engines.graph_extraction import EntityExtractor

    vocabulary = tenant_vocabulary(tenant_id, vocabulary_stamp)
    groups = (rule.terms for rule in vocabulary.synonyms if rule.kind == Synonym.Kind.EQUIVALENT)
    return EntityExtractor(vocabulary.analyzer, aliases_of(groups))


@lru_cache(maxsize=GRAPH_SETUP_CACHE_SIZE)
def _curation_at(versions: tuple[tuple[int, int], ...]) -> Curation:
    """The curation of the KBs of these (version id, revision) pairs."""
    version_ids = [version_id for version_id, _ in versions]
    return curation_of(GraphEntityRule.objects.filter(knowledge_base__versions__in=version_ids).distinct())
