"""Two checkouts served side by side at 100k chunks: ``python -m bench.hybrid_ab``."""
