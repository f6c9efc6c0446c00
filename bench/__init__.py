"""The service's benchmarks, one module each on top of :mod:`bench.harness`; run from the checkout's root
as ``.venv/bin/python -m bench.<name> --help``. They are not tests: they time things, write their result
to ``bench/results/`` and never run in ``./run test``. The micro-benchmarks (``bench/micro``) run under
pytest-benchmark (bench/README.md)."""
