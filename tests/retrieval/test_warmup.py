import pytest

from engines.embedders import DEFAULT_LOCAL_MODEL, loaded_embedders
from retrieval.warmup import warm_up


@pytest.mark.slow
def test_warm_up_loads_the_default_model_the_segmenter_and_its_tagger():
    warm_up()
    assert DEFAULT_LOCAL_MODEL in loaded_embedders()
    from engines.analysis import _pos_tagger, _segmenter

    assert _segmenter.loaded() and _segmenter().initialized
    assert _pos_tagger.loaded()
