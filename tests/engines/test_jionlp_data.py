"""JioNLP's data, read without importing jionlp. The words checked are written by hand."""

from __future__ import annotations

import sys

from engines.jionlp_data import defined_words


def test_the_general_dictionary_defines_common_words_not_transliterated_names():
    words = defined_words()
    assert {"沙丘", "恩爱", "谢恩", "晨光"} <= words
    assert not {"罗斯", "马里奥", "鱼香肉丝"} & words


def test_the_data_is_read_without_importing_jionlp():
    defined_words()
    assert "jionlp" not in sys.modules
