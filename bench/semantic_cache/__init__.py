"""The semantic cache's threshold (its paraphrase and near-miss sets beside it): ``python -m bench.semantic_cache``."""
