import sys

import numpy as np
import pytest

from engines.embedders import DEFAULT_LOCAL_MODEL, loaded_embedders
from retrieval.warmup import warm_up


@pytest.mark.slow
def test_warm_up_loads_the_default_model_the_segmenter_its_tags_and_numpys_quantile_code(monkeypatch):
    np.quantile(np.zeros(2), 0.5)  # whatever ran before: numpy.ma is loaded now, and taken away below
    for name in [name for name in sys.modules if name == "numpy.ma" or name.startswith("numpy.ma.")]:
        monkeypatch.delitem(sys.modules, name)
    monkeypatch.delattr(np, "ma")
    warm_up()
    assert DEFAULT_LOCAL_MODEL in loaded_embedders()
    from engines.analysis import _dictionary_tags, _segmenter

    assert _segmenter.loaded() and _segmenter().initialized
    assert _dictionary_tags.loaded()
    assert "numpy.ma" in sys.modules  # what np.quantile imports on its first call (the dense background's)
