"""The real Elasticsearch and Neo4j servers as session fixtures: started on first use (a run that
needs neither starts neither), shared by the run's tests, stopped when the run ends.

``TEST_ELASTICSEARCH_URL`` / ``TEST_NEO4J_URL`` point the tests at servers already running instead.
(The tests never read ``ELASTICSEARCH_URL`` / ``NEO4J_URL``: those switch the whole service's engines.)
Where this machine has no Java or Maven the tests that need a server skip and say why; on CI
(``CI=true``) that is a failure, since CI's machines have both."""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator

import pytest

from tests.servers import elasticsearch, neo4j, process


def _server_url(name: str, variable: str, start: Callable[[], tuple[process.Server, str]]) -> Iterator[str]:
    if os.environ.get(variable):
        yield os.environ[variable]
        return
    try:
        server, url = start()
    except process.ServerUnavailable as exc:
        if os.environ.get("CI") == "true":
            pytest.fail(f"CI must run the {name} tests: {exc}")
        pytest.skip(f"no {name} server for the tests: {exc}")
    try:
        yield url
    finally:
        server.stop()


@pytest.fixture(scope="session")
def elasticsearch_url() -> Iterator[str]:
    """The URL of a real Elasticsearch node (``tests.servers.elasticsearch``)."""
    yield from _server_url("Elasticsearch", "TEST_ELASTICSEARCH_URL", elasticsearch.start)


@pytest.fixture(scope="session")
def neo4j_url() -> Iterator[str]:
    """The ``bolt://`` URL of a real Neo4j (``tests.servers.neo4j``)."""
    yield from _server_url("Neo4j", "TEST_NEO4J_URL", neo4j.start)
