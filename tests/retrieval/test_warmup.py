import pytest

from engines.embedders import DEFAULT_LOCAL_MODEL, loaded_embedders
from retrieval.warmup import warm_up


@pytest.mark.slow
def test_warm_up_loads_the_default_model_the_segmenter_and_its_tags():
    warm_up()
    assert DEFAULT_LOCAL_MODEL in loaded_embedders()
    from engines.analysis import _dictionary_tags, _segmenter

    assert _segmenter.loaded() and _segmenter().initialized
    assert _dictionary_tags.loaded()
