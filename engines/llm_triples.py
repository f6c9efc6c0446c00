"""Typed relations (subject, relation, object) of a document's passages from an OpenAI-compatible chat
model, one call per document, asked for JSON that follows ``TRIPLES_SCHEMA``.

Bounded per document: its passages are sent until ``max_input_chars`` (the rest keep co-occurrence),
the answer is capped at ``max_output_tokens``, and the call is over within ``deadline_s``. Anything
wrong with the call or the answer raises :class:`engines.llm.LLMError`; the caller keeps the
co-occurrence relations then. A passage the answer gives no triple keeps its co-occurrence relations too.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass

from engines.base import Entity, Extraction
from engines.graph_extraction import EntityExtractor
from engines.llm import ChatClient, LLMError

MAX_NAME_CHARS = 200
MAX_RELATION_CHARS = 64
TRIPLES_SCHEMA = {
    "type": "object",
    "properties": {
        "triples": {
            "type": "array",
            "items": {
                "type": "object",
                "properties": {
                    "passage": {"type": "integer", "description": "the number of the passage stating it"},
                    "subject": {"type": "string"},
                    "relation": {"type": "string", "description": "a short verb phrase in snake_case"},
                    "object": {"type": "string"},
                },
                "required": ["passage", "subject", "relation", "object"],
                "additionalProperties": False,
            },
        }
    },
    "required": ["triples"],
    "additionalProperties": False,
}
SYSTEM_PROMPT = (
    "You extract a knowledge graph from numbered passages of one document. For each passage, list the "
    "facts it states as (subject, relation, object) triples between named entities: products, models and "
    "codes, organisations, people, places, dishes, components. Use the entity names as the passage writes "
    "them, in its language; relation is a short snake_case verb phrase in English (made_by, contains, "
    "located_in, awarded). Reply with one JSON object and nothing else, following this JSON schema:\n"
    + json.dumps(TRIPLES_SCHEMA)
)
_RELATION_CHARS = re.compile(r"[^\w]+")


@dataclass(frozen=True)
class Triple:
    passage: int  # index into the document's passages
    subject: str
    relation: str
    object: str


@dataclass(frozen=True)
class TripleLimits:
    timeout_s: float  # each socket operation
    deadline_s: float  # the whole call
    max_input_chars: int  # passages sent per document
    max_output_tokens: int


class TripleExtractor:
    def __init__(self, client: ChatClient, *, url: str, api_key: str, model: str, limits: TripleLimits):
        self.client, self.url, self.api_key, self.model, self.limits = client, url, api_key, model, limits

    def triples(self, passages: list[str]) -> dict[int, list[Triple]]:
        """Passage index -> its triples, for the passages sent (an empty list: none stated); raises
        ``LLMError``."""
        sent: list[int] = []
        used = 0
        for index, passage in enumerate(passages):
            if sent and used + len(passage) > self.limits.max_input_chars:
                break
            sent.append(index)
            used += len(passage)
        text = "\n\n".join(f"[{index + 1}]\n{passages[index][: self.limits.max_input_chars]}" for index in sent)
        payload = {
            "model": self.model,
            "messages": [{"role": "system", "content": SYSTEM_PROMPT}, {"role": "user", "content": text}],
            "temperature": 0,
            "max_tokens": self.limits.max_output_tokens,
            "response_format": {"type": "json_schema", "json_schema": {"name": "triples", "schema": TRIPLES_SCHEMA}},
        }
        content = self.client.complete(
            self.url,
            self.api_key,
            payload,
            timeout_s=self.limits.timeout_s,
            deadline_s=self.limits.deadline_s,
            purpose="triples",
        )
        found: dict[int, list[Triple]] = {index: [] for index in sent}
        for triple in parse_triples(content):
            if triple.passage in found:
                found[triple.passage].append(triple)
        return found


def parse_triples(content: str) -> list[Triple]:
    """The answer's triples (passage numbers from 1 become indexes from 0); raises ``LLMError`` when it
    is not a JSON object following the schema."""
    try:
        answer = json.loads(_strip_fence(content))
        items = answer["triples"]
        if not isinstance(items, list):
            raise TypeError("triples is not a list")
        triples = []
        for item in items:
            passage, subject, relation, obj = item["passage"], item["subject"], item["relation"], item["object"]
            if not isinstance(passage, int) or not all(isinstance(v, str) for v in (subject, relation, obj)):
                raise TypeError(f"a triple of the wrong types: {item!r}")
            relation = _RELATION_CHARS.sub("_", relation.strip().casefold()).strip("_")[:MAX_RELATION_CHARS]
            subject, obj = subject.strip()[:MAX_NAME_CHARS], obj.strip()[:MAX_NAME_CHARS]
            if subject and obj and relation:
                triples.append(Triple(passage - 1, subject, relation, obj))
    except (ValueError, KeyError, TypeError) as exc:
        raise LLMError("malformed_response", f"the LLM's triples do not follow the schema: {exc!r}") from exc
    return triples


def _strip_fence(content: str) -> str:
    """Models often wrap JSON in a Markdown code fence despite being told not to."""
    content = content.strip()
    if content.startswith("```"):
        content = content.split("\n", 1)[-1] if "\n" in content else ""
        content = content.rsplit("```", 1)[0]
    return content


def with_triples(extractor: EntityExtractor, extraction: Extraction, triples: list[Triple]) -> Extraction:
    """The passage's extraction with its relations typed by ``triples``, directed subject to object
    (their subjects and objects become entities too, normalized and resolved like the others); without
    triples, as it was."""
    if not triples:
        return extraction
    entities = {entity.name: entity for entity in extraction.entities}
    weights: dict[tuple[str, str, str], float] = {}
    for triple in triples:
        subject, obj = extractor.entity_name(triple.subject), extractor.entity_name(triple.object)
        if not subject or not obj or subject == obj or {subject, obj} & extractor.curation.deleted:
            continue
        for name, label in ((subject, triple.subject), (obj, triple.object)):
            entities.setdefault(name, Entity(name, label, "triple", 1))
        weights[subject, obj, triple.relation] = weights.get((subject, obj, triple.relation), 0.0) + 1.0
    if not weights:
        return extraction
    relations = ((source, target, weight, kind) for (source, target, kind), weight in weights.items())
    return Extraction.by_name(tuple(entities.values()), relations)
