"""The BM25 analyzer on a query and on a passage, English and Chinese (jieba's segmenter warmed first):
every search analyzes its query, every ingestion each chunk."""

from __future__ import annotations

import pytest

from engines.analysis import Analyzer

TEXTS = {
    "English query": "How long does the PortaLock Pro battery last on a full charge?",
    "Chinese query": "蜀香小馆的招牌菜是什么",
    "English passage": (
        "The SKY-30452 air monitor measures PM2.5, CO2 and humidity every ten seconds and raises error "
        "E-221 when its sensor drifts; update the firmware from the app, then recalibrate outdoors. "
    )
    * 6,
    "Chinese passage": "蜀香小馆位于成都市中心，招牌菜是鱼香肉丝和宫保鸡丁，厨房使用空气监测器保持通风。" * 6,
}


@pytest.fixture(scope="module")
def analyzer() -> Analyzer:
    analyzer = Analyzer()
    analyzer.analyze("warm-up 鱼香肉丝")  # jieba loads its dictionary once per process
    return analyzer


@pytest.mark.parametrize("kind", TEXTS)
def test_analyze(benchmark, analyzer, kind):
    assert benchmark(analyzer.analyze, TEXTS[kind])
