"""Filtered search at 100k-1M chunks beside the engines a user would pick instead: ``python -m bench.filtered_scale``."""
