"""Embedders: the bundled local model, and the remote OpenAI-compatible client over a real socket.

The remote side is a small HTTP server on 127.0.0.1 that answers with the real local model's
vectors (so a correct client reproduces local results) or with injected faults.
"""

import numpy as np
import pytest

from engines.embedders import EmbeddingError, get_embedder
from engines.embedders.openai_embedder import OpenAICompatibleEmbedder
from knowledge.ingestion.files import discover_files
from knowledge.ingestion.pipeline import Ingester
from knowledge.knowledge_bases import create_knowledge_base
from knowledge.models import Document
from retrieval.services.search import search
from retrieval.types import SearchRequest

pytestmark = pytest.mark.slow


def remote(server, **overrides) -> OpenAICompatibleEmbedder:
    options = {"url": server.url, "api_key": "secret", "timeout_s": 1.0, "batch_size": 4, "token_counter": len}
    return OpenAICompatibleEmbedder("remote:minilm", **{**options, **overrides})


def test_bundled_model_loads_offline_and_normalizes(embedder):
    vectors = embedder.embed_documents(["SKY-10023908 hub", "鱼香肉丝"])
    assert vectors.shape == (2, embedder.dimension) == (2, 384)
    assert np.allclose(np.linalg.norm(vectors, axis=1), 1.0, atol=1e-5)
    assert embedder.max_tokens == 254
    assert get_embedder() is embedder  # loaded once per process


def test_unknown_local_model_is_a_clear_error():
    with pytest.raises(EmbeddingError, match="unknown embedding model"):
        get_embedder("/nonexistent/model-folder")


@pytest.mark.parametrize("runtime", [":torch", ":onnx"])
def test_a_model_folder_that_fails_to_load_raises_embedding_error(unloadable_model, runtime):
    with pytest.raises(EmbeddingError, match="cannot load embedding model") as caught:
        get_embedder(f"{unloadable_model}{runtime}")
    assert caught.value.cause == "embedder_unavailable"


@pytest.mark.parametrize(("runtime", "threads"), [(":torch", 1), (":onnx", 1), (":onnx", 2)])
def test_a_runtime_failure_while_embedding_raises_embedding_error(overlong_model, runtime, threads, settings, tmp_path):
    settings.ONNX_CACHE_DIR, settings.ONNX_THREADS = tmp_path, threads
    embedder = get_embedder(f"{overlong_model}{runtime}")
    assert embedder.embed_documents(["a short text"]).shape == (1, 384)
    with pytest.raises(EmbeddingError, match="failed"):
        embedder.embed_documents(["word " * 700])  # more positions than the model has
    with pytest.raises(EmbeddingError, match="failed"):  # one failing batch among many (side by side with 2 threads)
        embedder.embed_documents(["a short text"] * 40 + ["word " * 700])


def test_remote_embedder_matches_the_local_model(embedding_server, embedder):
    client = remote(embedding_server)
    texts = [f"passage {i} about the PPR-9087 lock" for i in range(10)]
    assert client.dimension == 384
    assert np.allclose(client.embed_documents(texts), embedder.embed_documents(texts), atol=1e-5)
    batches = [r for r in embedding_server.requests if r.json()["input"] != ["dimension probe"]]
    assert [len(r.json()["input"]) for r in batches] == [4, 4, 2]
    assert all(r.path == "/v1/embeddings" and r.json()["model"] == "minilm" for r in batches)
    assert all(r.headers.get("authorization") == "Bearer secret" for r in batches)


@pytest.mark.parametrize("mode", ["500", "garbage", "short", "slow"])
def test_remote_faults_raise_embedding_error(embedding_server, mode):
    client = remote(embedding_server)
    embedding_server.mode = mode
    with pytest.raises(EmbeddingError, match="embedding endpoint"):
        client.embed_documents(["hello"])


def test_a_dripping_answer_is_cut_off_at_the_total_timeout(embedding_server):
    """One byte every 50 ms never trips the 1 s read timeout; the request as a whole gets 1 s, and a
    vector's thousands of bytes take minutes: the answer is still being sent when the client gives up."""
    client = remote(embedding_server)
    embedding_server.mode = "drip"
    with pytest.raises(EmbeddingError, match="deadline"):
        client.embed_documents(["hello"])
    [request] = [request for request in embedding_server.requests if request.json()["input"] == ["hello"]]
    assert request.outcome == "pending"


def test_refused_connection_raises_embedding_error(embedding_server):
    url = embedding_server.url
    embedding_server.close()
    with pytest.raises(EmbeddingError, match="embedding endpoint"):
        OpenAICompatibleEmbedder("remote:minilm", url=url, api_key="", timeout_s=1.0, batch_size=4, token_counter=len)


@pytest.mark.django_db
def test_a_kb_is_searched_with_the_model_that_built_it(tenant, tmp_path, remote_model, embedding_server):
    local_kb = create_knowledge_base(tenant=tenant, name="local")
    remote_kb = create_knowledge_base(tenant=tenant, name="remote", embedding_model="remote:minilm")
    assert (remote_kb.embedding_model, remote_kb.active_version.embedding_model) == ("remote:minilm", "remote:minilm")
    (tmp_path / "lock.txt").write_text("The PPR-9087 lock fits doors 35 to 80 mm thick.")
    Ingester(local_kb).ingest(discover_files([tmp_path]))
    Ingester(remote_kb).ingest(discover_files([tmp_path]))

    embedding_server.requests.clear()
    hits = search(
        tenant, SearchRequest(mode="vector", query="door thickness for the lock", top_k=5, kb_ids=[remote_kb.pk])
    ).results
    assert [hit.kb_id for hit in hits] == [remote_kb.pk]
    assert [r.json()["input"] for r in embedding_server.requests] == [["door thickness for the lock"]]

    embedding_server.requests.clear()
    hits = search(
        tenant, SearchRequest(mode="vector", query="door thickness for the lock", top_k=5, kb_ids=[local_kb.pk])
    ).results
    assert [hit.kb_id for hit in hits] == [local_kb.pk]
    assert embedding_server.requests == []


@pytest.mark.django_db
def test_remote_outage_fails_documents_and_searches_cleanly(
    tenant, tmp_path, remote_model, embedding_server, api_client
):
    kb = create_knowledge_base(tenant=tenant, name="remote", embedding_model="remote:minilm")
    (tmp_path / "a.txt").write_text("Returns are accepted within 30 days.")
    embedding_server.mode = "500"
    report = Ingester(kb).ingest(discover_files([tmp_path]))
    document = Document.objects.get(knowledge_base=kb)
    assert report.failed == 1 and document.status == Document.Status.FAILED
    assert "embedding failed" in document.error

    response = api_client.post("/api/v1/retrieval/vector", {"query": "returns"}, format="json")
    assert response.status_code == 503
    assert response.json()["error"]["code"] == "embedder_unavailable"


def test_a_query_embedding_obeys_the_search_deadline_not_the_ingestion_timeout(embedding_server):
    """The peer answers after 1.5 s: within the 5 s an ingestion batch may take, past a 0.3 s search deadline."""
    client = remote(embedding_server, timeout_s=5.0, query_deadline_s=0.3)
    embedding_server.mode = "slow"
    assert client.embed_documents(["hello"]).shape == (1, 384)
    with pytest.raises(EmbeddingError, match="deadline") as caught:
        client.embed_queries(["hello"])
    assert caught.value.cause == "deadline"


def test_a_query_embedding_budget_spans_its_batches(embedding_server):
    """Two batches of a dripping peer: the second gets what the first left of the budget, not a budget of its own."""
    client = remote(embedding_server, timeout_s=5.0, batch_size=1, query_deadline_s=0.5)
    embedding_server.mode = "drip"
    embedding_server.requests.clear()
    with pytest.raises(EmbeddingError) as caught:
        client.embed_queries(["one", "two"])
    assert caught.value.cause == "deadline"
    assert [r.json()["input"] for r in embedding_server.requests] == [["one"]]


@pytest.fixture
def short_search_deadline(settings):
    settings.SEARCH_DEADLINE_MS = 300  # read when the remote embedder loads (remote_model, after this)


@pytest.mark.django_db
def test_a_late_query_embedding_degrades_a_hybrid_search_and_fails_a_vector_one(
    tenant, tmp_path, short_search_deadline, remote_model, embedding_server, api_client
):
    kb = create_knowledge_base(tenant=tenant, name="remote", embedding_model="remote:minilm")
    (tmp_path / "lock.txt").write_text("The PPR-9087 lock fits doors 35 to 80 mm thick.")
    Ingester(kb).ingest(discover_files([tmp_path]))
    embedding_server.mode = "slow"  # answers after 1.5 s, past the 0.3 s search deadline

    response = api_client.post("/api/v1/retrieval/hybrid", {"query": "PPR-9087 lock"}, format="json")
    assert response.status_code == 200, response.content
    body = response.json()
    assert [(d["stage"], d["cause"]) for d in body["degraded"]] == [("vector", "deadline")]
    assert body["results"] and all("vector" not in hit["retrievers"] for hit in body["results"])

    response = api_client.post("/api/v1/retrieval/vector", {"query": "PPR-9087 lock"}, format="json")
    assert response.status_code == 503, response.content
    error = response.json()["error"]
    assert error["code"] == "embedder_unavailable" and "deadline" in error["message"]
