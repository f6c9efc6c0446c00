"""What the Neo4j graph store does without a server (its contract runs in test_graph_store.py where
``NEO4J_URL`` is set): it fails fast and typed, and its entity ids are stable plain integers."""

from __future__ import annotations

import socket

import pytest

from engines.base import GraphStoreError
from engines.neo4j_graph import Neo4jGraphStore, entity_id


def closed_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def test_an_unreachable_server_is_a_typed_error_without_the_password():
    with pytest.raises(GraphStoreError) as raised:
        Neo4jGraphStore(f"neo4j://neo4j:secret@127.0.0.1:{closed_port()}", timeout_s=1.0)
    assert raised.value.cause == "graph_unavailable"
    assert "secret" not in str(raised.value)


def test_entity_ids_are_stable_per_tenant_version_and_name():
    assert entity_id(1, 2, "ppr-9087") == entity_id(1, 2, "ppr-9087")
    assert len({entity_id(1, 2, "ppr-9087"), entity_id(1, 3, "ppr-9087"), entity_id(2, 2, "ppr-9087")}) == 3
    assert 0 < entity_id(1, 2, "x") < 2**63
