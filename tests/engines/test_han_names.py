"""Chinese names by jieba's dictionary tags and the rules of Chinese naming. The expected names are
written by hand."""

from __future__ import annotations

import pytest

from engines.han_names import han_names, tagged_words


def names(text: str) -> dict[str, str]:
    return {name: kind for _, name, kind in han_names(tagged_words(text))}


def kinds(text: str, kind: str) -> set[str]:
    return {name for name, found in names(text).items() if found == kind}


def test_places_are_the_gazetteers():
    text = "工程师上门安装后在日志里写下：成都市武侯区，柏林市和海宁县。"
    assert kinds(text, "place") == {"成都市", "武侯区", "柏林市", "海宁县"}
    assert not {"上门", "日志"} & names(text).keys()  # jieba's dictionary tags both places


def test_a_two_character_person_is_a_transliteration_or_titled():
    text = "白鹤飞过寺庙，高僧说罗斯来了。客户经理刘海到了，刘海先生很忙。"
    assert kinds(text, "person") == {"罗斯", "刘海"}


@pytest.mark.parametrize(("text", "person"), [("胡萝卜和曾效力的人", None), ("朱清时在讲课", "朱清时")])
def test_a_surname_before_a_common_word_is_no_person(text, person):
    assert kinds(text, "person") == ({person} if person else set())


def test_the_pieces_of_a_transliterated_name_are_one_name():
    found = names("吐瓦鲁、吉里巴斯、诺鲁；莱姆里杰斯的悬崖；埃及的马木留克。")
    assert {"吉里巴斯", "莱姆里杰斯", "马木留克"} <= found.keys()
    assert not {"吉里", "巴斯", "杰斯"} & found.keys()


def test_a_transliteration_takes_no_function_word_and_no_common_word_is_one():
    assert kinds("道德经说，林奈于1753年命名", "person") == {"林奈"}  # 于 is a preposition; 道德 is tagged nr


def test_a_short_organisation_word_starts_with_a_name():
    text = "税务局和外语学院的人去了哈佛大学和中央电视台，冰川冷链负责安装。"
    assert kinds(text, "organisation") == {"哈佛大学", "中央电视台", "冰川冷链"}


def test_a_two_character_transliteration_the_dictionary_defines_is_a_word_unless_titled():
    text = "沙丘上站着罗斯，他们恩爱多年。客户经理谢恩到了。"
    assert kinds(text, "person") == {"罗斯", "谢恩"}  # 沙丘 and 恩爱 are tagged nr; 谢恩 has a title


def test_a_verb_glued_to_a_character_starts_no_compound_name():
    assert kinds("她被召入后宫，粤海茶楼在此。", "organisation") == {"粤海茶楼"}


def test_a_places_centre_is_no_organisation():
    text = "温哥华市中心有温哥华世贸中心，新都区中心也很热闹。"
    assert kinds(text, "organisation") == {"温哥华世贸中心"}
    assert kinds(text, "place") == {"温哥华", "新都区"}
