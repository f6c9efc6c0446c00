"""Micro-benchmarks of the search's hot functions under pytest-benchmark, so a change can be compared
with the last commit's figures (bench/README.md). Never collected by the test run:
their files are ``bench_*.py``, which only this folder's conftest collects."""
