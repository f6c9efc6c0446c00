"""Load what the first search would otherwise wait for: the default embedding model (3-6 s; on a
fresh machine the first worker also exports it to ONNX, once, while the others wait on its lock),
the Chinese segmenter's dictionary (~0.5 s) and its part-of-speech tags, which the graph leg reads
to find a query's entities (another ~1 s), and numpy's quantile code, which the dense relevance
background imports on its first use (~10-20 ms). Called once per web worker, after it starts."""

import logging

logger = logging.getLogger(__name__)


def warm_up() -> None:
    import numpy as np

    from engines.analysis import Analyzer, part_of_speech
    from engines.embedders import get_embedder
    from retrieval.relevance import query_background

    get_embedder().embed_query("warm up")
    Analyzer().tokens("预热 warm up")
    part_of_speech("预热")
    query_background(np.ones(2, dtype=np.float32), np.eye(2, dtype=np.float32))
    logger.info("search engines warmed up")
