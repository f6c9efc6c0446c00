from typing import Any

from drf_spectacular.utils import extend_schema_field
from rest_framework import serializers

from core.fields import (
    ShallowFieldsSerializer,
    StrictBooleanField,
    StrictCharField,
    StrictFloatField,
    StrictIntegerField,
)
from knowledge.search_settings import (
    AGGREGATES,
    FUSIONS,
    GROUP_BY,
    LEG_CANDIDATES,
    LEG_WEIGHTS,
    MAX_CANDIDATES,
    MAX_FEEDBACK_DOCS,
    MAX_FEEDBACK_TERMS,
    MAX_RRF_K,
    MAX_WEIGHT,
)
from knowledge.serializers import CostOutput
from retrieval.services.planning import DENSE_SKIPPED_LANGUAGE, DENSE_WEIGHTED_LANGUAGE
from retrieval.tuning import (
    DEFAULT_AGGREGATE,
    DEFAULT_FEEDBACK,
    DEFAULT_FUSION,
    DEFAULT_GROUP_BY,
    DEFAULT_LEG_CANDIDATES,
    DEFAULT_LEG_WEIGHTS,
)
from retrieval.types import MODES, RETRIEVERS
from tenants.principals import MAX_PRINCIPAL, MAX_PRINCIPALS, PRINCIPAL_PATTERN, InvalidPrincipals, clean_principals

MAX_QUERY_CHARS = 2000
MAX_KB_IDS = 100


@extend_schema_field(
    {
        "type": "string",
        "minLength": 1,
        "maxLength": MAX_QUERY_CHARS,
        # Not blank once trimmed, and no NUL anywhere (what the field below enforces).
        "pattern": r"^[^\x00]*[^\s\x00][^\x00]*$",
        "description": "the search text; surrounding whitespace is trimmed, it may not be blank or hold NUL",
    }
)
class QueryField(StrictCharField):
    pass


@extend_schema_field(
    {
        "type": "object",
        "properties": {retriever: {"type": "number", "minimum": 0, "maximum": MAX_WEIGHT} for retriever in RETRIEVERS},
        "additionalProperties": False,
        # Named weights may not all be 0: that would search nothing.
        "not": {"minProperties": 1, "properties": {retriever: {"enum": [0]} for retriever in RETRIEVERS}},
        "description": "fusion weight per retriever (default: the KB's, else SEARCH_WEIGHT_*; in three-way hybrid the "
        "graph's is SEARCH_WEIGHT_GRAPH_HYBRID, 0.1; hybrid: a graph weight > 0 adds the graph leg, which votes "
        "only below the other legs' top GRAPH_FUSION_HEAD); 0 skips a leg, but not every leg named",
    }
)
class WeightsField(serializers.DictField):
    child = StrictFloatField(min_value=0, max_value=MAX_WEIGHT)

    def to_internal_value(self, data: Any) -> dict[str, float]:
        weights = super().to_internal_value(data)
        unknown = sorted(set(weights) - set(RETRIEVERS))
        if unknown:
            raise serializers.ValidationError(f"unknown retriever(s) {', '.join(unknown)}; use {', '.join(RETRIEVERS)}")
        if weights and not any(weights.values()):
            raise serializers.ValidationError("at least one weight must be above 0, or nothing is searched")
        return weights


CANDIDATES_HELP = (
    'depth of each retriever\'s list before fusion: one integer for every leg, or per leg ({"vector": 80, '
    '"bm25": 40}; a leg not named takes the default); default: the KB\'s, else SEARCH_CANDIDATES; a value '
    "below top_k is raised to top_k"
)


@extend_schema_field(
    {
        "oneOf": [
            {"type": "integer", "minimum": 1, "maximum": MAX_CANDIDATES},
            {
                "type": "object",
                "properties": {
                    retriever: {"type": "integer", "minimum": 1, "maximum": MAX_CANDIDATES} for retriever in RETRIEVERS
                },
                "additionalProperties": False,
                "minProperties": 1,
            },
        ],
        "description": CANDIDATES_HELP,
    }
)
class CandidatesField(serializers.Field[Any, Any, Any, Any]):
    """An integer depth for every leg, or an object of depths per leg."""

    depth = StrictIntegerField(min_value=1, max_value=MAX_CANDIDATES)

    def to_internal_value(self, data: Any) -> int | dict[str, int]:
        if not isinstance(data, dict):
            depth: int = self.depth.run_validation(data)
            return depth
        unknown = sorted(set(data) - set(RETRIEVERS))
        if unknown:
            raise serializers.ValidationError(f"unknown retriever(s) {', '.join(unknown)}; use {', '.join(RETRIEVERS)}")
        if not data:
            raise serializers.ValidationError("name at least one retriever's depth, or give one integer")
        depths: dict[str, int] = {}
        errors: dict[str, Any] = {}
        for retriever, value in data.items():
            try:
                depths[retriever] = self.depth.run_validation(value)
            except serializers.ValidationError as exc:
                errors[retriever] = exc.detail
        if errors:
            raise serializers.ValidationError(errors)
        return depths

    def to_representation(self, value: Any) -> Any:
        return value


@extend_schema_field(
    {
        "type": "object",
        "description": "ANDed conditions on doc_type, doc_id, created_at, tags and metadata.<key>, with "
        "and / or / not; the grammar (docs/api.md, Filters) needs key patterns OpenAPI 3.0 cannot state",
    }
)
class FiltersField(serializers.JSONField):
    pass


class PrincipalsField(serializers.ListField):
    """The end user a search runs for (docs/permissions.md): only a key with the ``act_as`` scope may
    send it (else 403 ``act_as_not_allowed``); a key bound to principals searches as those instead."""

    def __init__(self, **kwargs: Any) -> None:
        kwargs.setdefault(
            "help_text",
            "the end user's principals ('user:<id>', 'group:<id>'; '*' is always added): documents whose ACL "
            "holds none of them are never returned. Needs the act_as scope; a key bound to principals ignores it",
        )
        child = serializers.RegexField(PRINCIPAL_PATTERN, max_length=MAX_PRINCIPAL, trim_whitespace=False)
        super().__init__(child=child, max_length=MAX_PRINCIPALS, **kwargs)

    def to_internal_value(self, data: Any) -> list[str]:
        values = super().to_internal_value(data)
        try:
            return clean_principals(values)
        except InvalidPrincipals as error:
            raise serializers.ValidationError(str(error)) from None


MAX_HOPS = 3


class ExpandInput(ShallowFieldsSerializer):
    """Query expansion switches; an omitted switch takes the tenant's default."""

    synonyms = StrictBooleanField(required=False, allow_null=True, default=None)
    spelling = StrictBooleanField(required=False, allow_null=True, default=None)
    llm = StrictBooleanField(required=False, allow_null=True, default=None)
    max_expansions = StrictIntegerField(min_value=0, max_value=10, default=3)


MAX_QUERY_VECTOR_DIMENSIONS = 16_000  # pgvector's largest vector


class QueryVectorInput(ShallowFieldsSerializer):
    """A caller's own embedding of the query, with the model it came from (both are checked against the
    searched KB versions: 400 ``query_vector_mismatch``)."""

    model = StrictCharField(
        max_length=200, help_text="the embedding model that made it, as the KB version names it (embedding_model)"
    )
    values = serializers.ListField(
        child=StrictFloatField(),
        min_length=1,
        max_length=MAX_QUERY_VECTOR_DIMENSIONS,
        help_text="the query's embedding, as many finite numbers as the model's dimension (embedding_dim); "
        "scaled to unit length before the cosine search, so it may not be all zeros",
    )

    def validate_values(self, values: list[float]) -> list[float]:
        if not any(values):
            raise serializers.ValidationError("a zero vector has no direction to search")
        return values


class SearchInput(ShallowFieldsSerializer):
    query = QueryField(max_length=MAX_QUERY_CHARS, trim_whitespace=True)
    top_k = StrictIntegerField(min_value=1, max_value=100, default=10)
    kb_ids = serializers.ListField(
        child=StrictIntegerField(min_value=1, max_value=2**63 - 1), required=False, max_length=MAX_KB_IDS
    )
    filters = FiltersField(required=False)
    principals = PrincipalsField(required=False)
    weights = WeightsField(required=False)
    candidates = CandidatesField(required=False, help_text=CANDIDATES_HELP)
    fusion = serializers.ChoiceField(
        choices=FUSIONS,
        required=False,
        help_text="how the retrievers' lists become one: rrf (weighted reciprocal rank fusion), relevance (the "
        "weighted sum of each hit's calibrated relevance per retriever) or minmax (the weighted sum of each "
        f"list's scores scaled to 0-1 by its own minimum and maximum); default: the KB's, else {DEFAULT_FUSION}",
    )
    leg_weights = serializers.ChoiceField(
        choices=LEG_WEIGHTS,
        required=False,
        help_text="rrf: evidence (each leg's weight scaled for this query by the square of its first hit's "
        "relevance, the legs' weights keeping their sum) or fixed (the weights as given, for every query); "
        f"default: the KB's, else {DEFAULT_LEG_WEIGHTS}",
    )
    leg_candidates = serializers.ChoiceField(
        choices=LEG_CANDIDATES,
        required=False,
        help_text="hybrid: union (BM25 and dense each also rank the other leg's first 10 hits, scoring those they "
        "did not find without searching again) or own (each leg ranks only what it found); default: the KB's, "
        f"else {DEFAULT_LEG_CANDIDATES}",
    )
    rrf_k = StrictIntegerField(
        min_value=1, max_value=MAX_RRF_K, required=False, help_text="RRF k (default: the KB's, else RRF_K)"
    )
    dense_weight_floor = StrictFloatField(
        min_value=0,
        max_value=MAX_WEIGHT,
        required=False,
        help_text="hybrid: the dense weight for a query in a language the KB's model does not cover (default: "
        "the KB's, else DENSE_WEIGHT_FLOOR)",
    )
    rerank = StrictBooleanField(default=False)
    graph = StrictBooleanField(
        default=False,
        help_text="hybrid: fuse the graph leg as a third list (weight SEARCH_WEIGHT_GRAPH_HYBRID unless given); it "
        "reorders and extends what lies below the other legs' heads (GRAPH_FUSION_HEAD), never the heads",
    )
    hops = StrictIntegerField(
        min_value=0, max_value=MAX_HOPS, required=False, help_text="graph leg: neighbourhood size (GRAPH_HOPS)"
    )
    aggregate = serializers.ChoiceField(
        choices=AGGREGATES,
        required=False,
        help_text="how the matched chunks of one document add up before top_k is cut: none (each chunk on its "
        "own), max (the best chunk's score), sum (the best plus a damped sum of the next); default: the KB's, "
        f"else {DEFAULT_AGGREGATE}",
    )
    group_by = serializers.ChoiceField(
        choices=GROUP_BY,
        required=False,
        help_text="document: one hit per document (its best chunk, the others in passages); default: the KB's, "
        f"else {DEFAULT_GROUP_BY}",
    )
    score_threshold = StrictFloatField(
        min_value=0,
        max_value=1,
        default=0.0,
        help_text="drop hits whose relevance (the calibrated chance a hit is judged relevant) is below this (0 to 1)",
    )
    feedback_docs = StrictIntegerField(
        min_value=0,
        max_value=MAX_FEEDBACK_DOCS,
        required=False,
        help_text="BM25 leg: RM3 pseudo-relevance feedback from this many top passages of a first pass, "
        f"0 for none (default: the KB's, else {DEFAULT_FEEDBACK.docs})",
    )
    feedback_terms = StrictIntegerField(
        min_value=1,
        max_value=MAX_FEEDBACK_TERMS,
        required=False,
        help_text=f"RM3: the feedback passages' words added to the query (default: the KB's, else {DEFAULT_FEEDBACK.terms})",
    )
    feedback_query_weight = StrictFloatField(
        min_value=0,
        max_value=1,
        required=False,
        help_text="RM3: the original query's share of the expanded query's weights (default: the KB's, else "
        f"{DEFAULT_FEEDBACK.query_weight})",
    )
    expand = ExpandInput(required=False)
    query_vector = QueryVectorInput(
        required=False,
        help_text="vector and hybrid: the caller's embedding of query; the dense leg searches it and the service "
        "does not embed the query (only variants an expansion adds); query still drives BM25, the reranker and "
        "highlighting",
    )

    def validate(self, data: dict[str, Any]) -> dict[str, Any]:
        candidates = data.get("candidates")  # fusing fewer than top_k candidates could not fill the answer
        if isinstance(candidates, dict):
            data["candidates"] = {leg: max(depth, data["top_k"]) for leg, depth in candidates.items()}
        elif candidates is not None:
            data["candidates"] = max(candidates, data["top_k"])
        return data


class ModeSearchInput(SearchInput):
    mode = serializers.ChoiceField(choices=MODES, default="hybrid")


class BridgeOutput(serializers.Serializer[Any]):
    via = serializers.IntegerField(help_text="chunk id of the passage of the fused top ranks it is one passage on from")
    entity = serializers.CharField(help_text="the entity both passages mention")


class ContributionOutput(serializers.Serializer[Any]):
    rank = serializers.IntegerField(help_text="in the retriever's list; 0: a graph bridge the list did not rank")
    score = serializers.FloatField()
    query = serializers.CharField()
    entities = serializers.ListField(
        child=serializers.CharField(), required=False, help_text="graph only: the query's entities it matched"
    )
    path = serializers.ListField(
        child=serializers.CharField(),
        required=False,
        help_text="graph only: from a query entity to one this passage mentions, entities and the relation between "
        "each two: [entity, relation, entity, ...]; a relation is its kind, read in the direction walked (stated by a "
        "sentence or typed by the LLM: made_by, and makes from the maker's side; supplied_by/supplies, uses/used_by, "
        "applies_to/covered_by, part_of/has_part) or co_occurs",
    )
    hops = serializers.IntegerField(required=False, help_text="graph only: relations along the path")
    bridge = BridgeOutput(
        required=False,
        help_text="three-way hybrid only: a passage one passage on from a top passage naming a query entity, which "
        "the bridge slots may place from rank GRAPH_BRIDGE_RANK on (its strongest step)",
    )


class PassageOutput(serializers.Serializer[Any]):
    chunk_id = serializers.IntegerField()
    content = serializers.CharField()
    ordinal = serializers.IntegerField()
    fused_score = serializers.FloatField()


class ChildRankOutput(serializers.Serializer[Any]):
    rank = serializers.IntegerField(help_text="its best rank in this retriever's lists")
    score = serializers.FloatField()


class MatchedChildOutput(serializers.Serializer[Any]):
    chunk_id = serializers.IntegerField()
    ordinal = serializers.IntegerField(help_text="its place among its document's child chunks")
    retrievers = serializers.DictField(child=ChildRankOutput(), help_text="retriever -> its own rank and score")


class SearchHitOutput(serializers.Serializer[Any]):
    chunk_id = serializers.IntegerField(
        help_text="the chunk found; in a parent_child knowledge base, the best-ranked child of the passage returned"
    )
    doc_id = serializers.IntegerField()
    kb_id = serializers.IntegerField()
    content = serializers.CharField()
    score = serializers.FloatField(help_text="rerank score if reranked, else fused score; a single list's raw score")
    source = serializers.CharField()  # type: ignore[assignment]  # a declared field: DRF's serializer metaclass takes it off the class
    rank = serializers.IntegerField()
    title = serializers.CharField()
    source_uri = serializers.CharField()
    doc_type = serializers.CharField()
    metadata = serializers.DictField()
    section = serializers.CharField(
        allow_null=True,
        help_text="the headings above the chunk in its Markdown or HTML document, outermost first, joined by "
        "' > ' (the title leads no path); read with the chunk by both retrievers, never repeated in content; "
        "null without headings",
    )
    relevance = serializers.FloatField(
        help_text="0 to 1, comparable across queries of a knowledge base: the chance that such a hit is judged "
        "relevant (0.5: more likely relevant than not), calibrated from the stronger of the BM25 score over the "
        "query's highest possible one and the cosine above the query's own background (its 95th-percentile "
        "cosine to a fixed sample of the KB's passages)"
    )
    fused_score = serializers.FloatField()
    rerank_score = serializers.FloatField(allow_null=True)
    retrievers = serializers.DictField(child=ContributionOutput())
    matched_queries = serializers.ListField(child=serializers.CharField())
    document_score = serializers.FloatField(
        allow_null=True, help_text="its document's aggregated score (aggregate max or sum); null otherwise"
    )
    passages = PassageOutput(
        many=True,
        allow_null=True,
        help_text="group_by document: up to 3 other matched chunks of the document, best first; null otherwise",
    )
    parent_id = serializers.IntegerField(
        allow_null=True,
        help_text="parent_child knowledge bases: the parent passage returned as content (its children are searched; "
        "several matched children of one parent are one hit, ranked by the best child per retriever); null otherwise",
    )
    children = MatchedChildOutput(
        many=True,
        allow_null=True,
        help_text="parent_child: the passage's children that matched, in the order found, each with its own rank "
        "and score per retriever; null otherwise",
    )


class QueryOutput(serializers.Serializer[Any]):
    text = serializers.CharField()
    weight = serializers.FloatField()
    origin = serializers.CharField()


class DegradationOutput(serializers.Serializer[Any]):
    stage = serializers.CharField()
    cause = serializers.CharField()
    message = serializers.CharField()
    fallback = serializers.ChoiceField(
        choices=["fused", "dense"],
        required=False,
        help_text="rerank only: the order answered instead (RERANK_FALLBACK_ORDER): fused, or dense (by cosine, "
        "hits the dense leg did not find after them in fused order)",
    )


@extend_schema_field(
    {
        "oneOf": [{"type": "boolean"}, {"type": "string", "enum": ["semantic"]}],
        "description": 'true: this request\'s answer from the result cache; "semantic": the answer of a close '
        "enough earlier query (named in cache) of a KB with the semantic cache on; false: computed",
    }
)
class CachedField(serializers.Field[Any, Any, Any, Any]):
    def to_representation(self, value: Any) -> Any:
        return value

    def to_internal_value(self, data: Any) -> bool | str:
        if data is True or data is False:
            return bool(data)
        if data == "semantic":
            return "semantic"
        raise serializers.ValidationError('true, false or "semantic"')


class SemanticCacheOutput(serializers.Serializer[Any]):
    kind = serializers.ChoiceField(choices=["semantic"])  # CacheKindEnum (ENUM_NAME_OVERRIDES)
    query = serializers.CharField(help_text="the cached query whose answer this is (its queries, weights, hits)")
    cosine = serializers.FloatField(help_text="of the two queries' embeddings, at least SEMANTIC_CACHE_MIN_COSINE")


class NoticeOutput(serializers.Serializer[Any]):
    stage = serializers.CharField(help_text="the retriever or stage adjusted, as in degraded")
    code = serializers.ChoiceField(
        choices=[DENSE_SKIPPED_LANGUAGE, DENSE_WEIGHTED_LANGUAGE],
        help_text="stable: dense_skipped_language, the dense leg did not run because no searched model covers the "
        "query's language (DENSE_WEIGHT_FLOOR 0); dense_weighted_language, it ran turned down to the floor",
    )
    message = serializers.CharField(help_text="the same sentence as in notes")


class SearchOutput(serializers.Serializer[Any]):
    results = SearchHitOutput(many=True)
    total = serializers.IntegerField()
    mode = serializers.CharField()
    queries = QueryOutput(many=True)
    weights = serializers.DictField(child=serializers.FloatField())
    reranked = serializers.BooleanField()
    cached = CachedField()
    cache = SemanticCacheOutput(required=False, help_text="a semantic hit only: the query reused")
    degraded = DegradationOutput(many=True)
    notes = serializers.ListField(child=serializers.CharField(), help_text="how the search ran, for people")
    notices = NoticeOutput(
        many=True, help_text="the adjustments of the plan a client can act on, by a stable code (not failures)"
    )
    candidates = serializers.DictField(child=serializers.IntegerField())
    timings_ms = serializers.DictField(
        child=serializers.FloatField(),
        help_text="milliseconds per stage; stages run concurrently (the embedding and the keyword index's search "
        "beside the request thread), so they add up to more than total",
    )
    critical_path_ms = serializers.DictField(
        child=serializers.FloatField(),
        help_text="where the request thread's time went: its own stages, its waits for a stage on another thread "
        "(counted to that stage) and rest (untimed work: KB lookup, hydration); these add up to total",
    )
    cost = CostOutput(
        help_text="what this answer consumed so far (a cache hit: its lookup's CPU only), priced by the COST_PRICE_* "
        "settings; charged to the tenant's day (GET /api/v1/stats)"
    )
    latency_ms = serializers.FloatField()
    request_id = serializers.CharField()
