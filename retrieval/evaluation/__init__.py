"""Relevance evaluation on BEIR-layout datasets, through the service's own search pipeline."""
