"""What ``relevance`` reports: the raw score (``retrieval.relevance``) mapped onto the chance that a
hit is judged relevant, so that 0.5 means "more likely relevant than not".

The raw score is a share of a bound (BM25's ceiling, the dense background, the graph's ceiling): it
orders hits well across queries, but its numbers meant little to a reader (on-topic top hits of the
sample KB scored 0.16-0.26, and keeping 90 % of SciFact's relevant hits took a threshold of 0.28).
Platt's mapping, ``1 / (1 + exp(-(SLOPE * raw + INTERCEPT)))``, fitted on the top-10 hybrid hits of
every judged query of the shared sets' tuning splits (SciFact train; XQuAD-en, XQuAD-zh, CMRC 2018
and DRCD dev), each set weighing the same. A raw 0 (no retriever scored the hit) stays 0.

The mapping is monotone and applied to the hits as they are shown, after ranking: fusion and the
per-query evidence weights read the raw scores, so no ranking changes. The constants are those of
``RESULTS_FILE`` (``bench.relevance_calibration.fit``; a test checks they match).
"""

from __future__ import annotations

import math

RESULTS_FILE = "docs/benchmarks/results/relevance-calibration.json"
SLOPE = 10.3949
INTERCEPT = -4.9985


def calibrated(raw: float) -> float:
    """The chance that a hit of this raw relevance is judged relevant; 0.0 for a raw 0."""
    if raw <= 0.0:
        return 0.0
    return 1.0 / (1.0 + math.exp(-(SLOPE * raw + INTERCEPT)))
