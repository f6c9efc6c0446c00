"""Project package.

Thread pools are capped before numpy/torch load: on 2 cores torch's OpenMP pool and OpenBLAS's pool
fight each other (a hybrid query measured 40 ms median with defaults, 17 ms with OpenBLAS at 1).
"""

import os

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
os.environ.setdefault("MKL_NUM_THREADS", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")
os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")

# The Celery app loads with Django, so @shared_task tasks bind to it (Celery's Django guide).
from retrieval_site.celery import app as celery_app

__all__ = ("celery_app",)
