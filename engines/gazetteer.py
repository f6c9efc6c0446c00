"""Place names for the entity extractor: JioNLP's gazetteer of China's provinces, cities, counties and
towns (with the short names of all but the towns, and the names they had before a change) and of the
world's countries, capitals and main cities. jieba's dictionary tags hundreds of common words as places (上门, 入门, 日志,
铺平); a name in a gazetteer is a place a curator would keep.
"""

from __future__ import annotations

from functools import cache

from engines.jionlp_data import dictionary_file, zipped_text

# What ends the full name of a place (成都市, 郫县, 南翔镇): a word ending so is a place when what it
# names without the ending is in the gazetteer (柏林 + 市, 金华 + 县).
PLACE_SUFFIXES = frozenset("省市县区州镇乡郡")


def is_place(word: str) -> bool:
    """Whether ``word`` names a place of the gazetteer, in full, by its short name or by its name
    and a place suffix (柏林市)."""
    names = place_names()
    if word in names:
        return True
    return len(word) >= 3 and word[-1] in PLACE_SUFFIXES and word[:-1] in names


@cache
def place_names() -> frozenset[str]:
    """Every place name of the gazetteer of two characters or more."""
    names: set[str] = set()
    for line in zipped_text("china_location").splitlines():
        depth = len(line) - len(line.lstrip("\t"))
        if depth > 3:
            continue  # villages and communities: 光明村, 东园社区 name thousands of places each
        full, *rest = line.strip().split("\t")
        names.add(full)
        # the short name of a province, city or county (成都市: 成都; rest[0] is the administrative code);
        # a town has none, and its name without 镇 is often a word or a village's (云山, 中村)
        names.update(rest[1:2])
    changes = dictionary_file("china_location_change.txt").read_text(encoding="utf-8")
    for line in changes.splitlines():
        before = line.split("=>")[0].split("\t")[2:]  # province, its short name, city, short name, county, ...
        names.update(before)
    world = dictionary_file("world_location.txt").read_text(encoding="utf-8")
    for line in world.splitlines():
        if not line.endswith(":"):  # a continent's heading
            names.update(name for column in line.split("\t") for name in column.split("/"))
    return frozenset(name for name in names if len(name) >= 2)
