"""Chinese names in a passage's jieba words, by their dictionary tags and by the rules of Chinese naming:
places from the gazetteer, people by surname or in transliteration characters (pieces jieba cut joined),
organisations that start with a name, and compound shop and maker names (粤海茶楼). No model: jieba's
dictionary tags hundreds of common words as names (上门 a place, 胡萝卜 a person), and these rules take
them out (docs/benchmarks/entity-precision.md)."""

from __future__ import annotations

from engines.analysis import OUT_OF_DICTIONARY, dictionary_frequency, dictionary_tag, han_runs, part_of_speech
from engines.gazetteer import PLACE_SUFFIXES, is_place
from engines.jionlp_data import defined_words

Tagged = list[tuple[int, str, str]]  # (offset, word, tag) of a text's Han words, in order

# jieba dictionary tags kept, by prefix: a person only where a common surname starts it (the dictionary
# tags 齐全, 续航 or 胡萝卜 nr too); a plain noun is no entity by itself, only inside a compound name.
_HAN_KINDS = {"nr": "person", "ns": "place", "nt": "organisation"}
_TRANSLITERATED = "nrt"
# A word tagged a person that jieba's dictionary counts more often than this is a common word first
# (顾客 1,365, 胡同 1,762, 明白 10,875; 岳飞 680): the few famous names above it are lost.
PERSON_MAX_FREQUENCY = 800  # a foreign name (马里奥): no surname to check
# ... and a surname before a word the dictionary counts this often is a phrase (曾效力: 效力 753; 朱清时: 清时 3)
COMMON_GIVEN_FREQUENCY = 100
# An organisation word this long is a name (中央电视台); a shorter one must start with one (``_proper_prefix``).
LONG_ORGANISATION = 5
# What stands before a person's name (客户经理刘海, 主厨王建国) or after it (刘海先生): general Chinese usage.
_TITLES = (
    "经理", "主任", "主厨", "厨师", "店长", "老板", "总监", "董事长", "总裁", "教授", "医生", "老师", "记者", "院长",
    "校长", "队长", "局长", "部长", "书记", "作家", "演员", "导演", "歌手", "画家", "诗人", "将军",
)  # fmt: skip
_HONORIFICS = frozenset({"先生", "女士", "小姐", "教授", "老师", "医生", "师傅"})
# Common Chinese surnames (the Hundred Family Surnames' most frequent, and compound ones).
_SURNAMES = frozenset(
    "王李张刘陈杨黄赵吴周徐孙马朱胡郭何高林罗郑梁谢宋唐许韩冯邓曹彭曾肖田董袁潘于蒋蔡余杜叶程苏魏吕丁任沈姚卢姜"
    "崔钟谭陆汪范金石廖贾夏韦付方白邹孟熊秦邱江尹薛闫段雷侯龙史陶黎贺顾毛郝龚邵万钱严覃武戴莫孔向汤常温康施文牛樊"
    "葛邢安齐易乔伍庞颜倪庄聂章鲁岳翟殷詹申欧耿关兰焦俞左柳甘祝包宁尚符舒阮柯纪梅童凌毕单季裴霍涂成苗谷盛曲翁冉"
    "骆蓝路游辛靳管柴蒙鲍华喻祁蒲房滕屈饶解牟艾尤阳时穆农司卓古吉缪简车项连芦麦褚娄窦戚岑景党宫费卜冷晏席卫米柏"
    "宗瞿桂全佟应臧闵苟邬边卞姬师和仇栾隋商刁沙荣巫寇桑郎甄丛仲虞敖巩明佘池查麻苑迟邝"
)
# The characters Chinese writes foreign names with (马里奥, 特鲁多, 梅塞德斯).
_TRANSLITERATION = frozenset(
    "阿艾爱安昂奥澳巴拜班邦包保鲍贝本比彼毕宾滨波伯勃博布查达戴丹道德登迪蒂丁东杜多厄恩尔法范菲斐费芬丰佛弗福"
    "富盖甘冈高戈格葛根古瓜圭哈海汉豪赫黑亨洪胡华怀霍基吉济加佳贾杰捷金卡凯坎康考柯科克肯库夸奎昆拉莱赖兰朗劳"
    "勒雷蕾黎里理利莉丽连林琳留隆卢鲁陆路伦罗洛吕马玛迈麦曼芒梅美门蒙米密明摩莫墨默姆穆纳娜奈南内尼妮涅宁纽"
    "努诺欧帕潘庞佩彭皮平珀普齐奇恰乔琴琼丘屈让热瑞若撒萨塞赛桑瑟森沙莎尚舍圣施什史舒斯松苏索塔泰坦汤唐特提"
    "汀通图托瓦万旺威韦维温文沃乌伍武西希锡席夏谢辛休许雅亚扬耶伊依因英尤于约泽扎詹兹佐"
)
_COMPOUND_SURNAMES = (
    "欧阳",
    "司马",
    "上官",
    "诸葛",
    "东方",
    "皇甫",
    "尉迟",
    "公孙",
    "慕容",
    "长孙",
    "夏侯",
    "轩辕",
    "令狐",
)
# What ends a shop's, a maker's or an organisation's name (粤海茶楼, 勐海晨光茶厂, 华瑞电器): a compound of
# a proper word and nouns is a name when its last word ends so. General Chinese naming, not drawn from a corpus.
_NAME_HEADS = (
    "公司", "集团", "银行", "大学", "学院", "学校", "医院", "中心", "协会", "研究所", "研究院", "委员会", "餐厅", "饭店",
    "酒店", "酒家", "酒楼", "茶楼", "茶馆", "面馆", "小馆", "菜馆", "餐馆", "食堂", "超市", "商场", "电器", "科技", "电子",
    "物流", "快递", "工作室", "俱乐部", "出版社", "馆", "坊", "楼", "店", "厂", "社", "铺", "寺", "庙", "宫", "院",
    # a company's trade (字号 + 行业: 冰川冷链, 深蓝传感)
    "冷链", "传感", "配送", "食品", "制药", "医药", "机械", "能源", "贸易", "实业", "控股", "传媒", "软件", "通信",
)  # fmt: skip
_NAME_STARTS = frozenset({"nr", "nrt", "ns", "nt", "nz", "j", "x", OUT_OF_DICTIONARY})  # a compound name's first word
_MAX_COMPOUND_WORDS = 4
# Tags (by first letter) of the characters that edge no out-of-dictionary name: pronoun, preposition,
# particle, conjunction, adverb, numeral, classifier, locality, modal, interjection, onomatopoeia. The
# HMM glues them to a neighbour ("这张", "之初", "日起"); jieba's POS tagger kept none of those.
_FUNCTION_TAGS = frozenset("rpucdmqfyeo")
# ... and of the single characters that join no transliteration's pieces: pronoun, preposition, particle,
# conjunction, modal, interjection (a locality such as 里 is a transliteration's character as often).
_GRAMMAR_TAGS = frozenset("rpucye")


def han_names(tagged: Tagged) -> list[tuple[int, str, str]]:
    """(offset, name, kind) of the names among ``tagged`` words, in text order, two characters or more."""
    found = []
    compounds = _han_compounds(tagged)
    at = 0
    while at < len(tagged):
        offset, word, flag = tagged[at]
        if (end := compounds.get(at)) is not None:
            found.append((offset, "".join(part for _, part, _ in tagged[at:end]), "organisation"))
            at = end
            continue
        kind = _han_kind(word, flag)
        if kind is None and _titled(tagged, at):
            kind = "person"  # 客户经理刘海, 刘海先生: a two-character name where a title says it is one
        if kind == "person":
            start, end = _transliteration_span(tagged, at, pieces=_transliterated(word, flag))
            offset, name = tagged[start][0], "".join(part for _, part, _ in tagged[start:end])
            # a two-character transliteration the general dictionary defines is a word (沙丘), unless titled
            if len(name) > 2 or (len(name) == 2 and (name not in defined_words() or _titled(tagged, at))):
                found.append((offset, name, "place" if is_place(name) else kind))
            at = end
            continue
        if kind and len(word) >= 2:
            found.append((offset, word, kind))
        at += 1
    return found


def is_surname(text: str) -> bool:
    """Whether ``text`` is a common surname (王) or a compound one (欧阳)."""
    return text in _SURNAMES or text in _COMPOUND_SURNAMES


def tagged_words(folded: str) -> Tagged:
    """(offset, word, tag) of the jieba words of the text's Han runs, in order."""
    found = []
    for run in han_runs(folded):
        offset = run.start()
        for word, tag in part_of_speech(run.group()):
            found.append((offset, word, tag))
            offset += len(word)
    return found


def _han_kind(word: str, flag: str) -> str | None:
    """The entity kind of a Chinese word by its dictionary tag, or None: plain nouns, other proper nouns
    (nz: 普通, 联网 as often as 京沪铁路) and the HMM's out-of-dictionary words are entities only inside a
    compound name (``_han_compounds``). A place is one the gazetteer names (the dictionary tags 上门 and
    日志 places, 武侯区 a person). A person is a transliteration (``_transliterated``) or a name of three
    or four characters that starts with a surname no common word follows: the two-character words the
    dictionary tags persons are common words far more often (白鹤, 方正, 高僧, 叶柄; none of the 15 in the
    judged samples was a name), and the few famous names among them are lost."""
    kind = _HAN_KINDS.get(flag[:2])
    if kind is None:
        return None
    if is_place(word):
        return "place"
    if kind == "person":
        if _transliterated(word, flag):
            return "person"
        if flag == _TRANSLITERATED or not 3 <= len(word) <= 4:
            return None
        surname = next((prefix for prefix in _COMPOUND_SURNAMES if word.startswith(prefix)), word[:1])
        surnamed = surname in _SURNAMES or len(surname) == 2
        return "person" if surnamed and _rare(word) and not _common_word(word[len(surname) :]) else None
    if kind == "organisation" and len(word) < LONG_ORGANISATION and not _proper_prefix(word):
        return None
    return None if kind == "place" else kind


def _proper_prefix(word: str) -> bool:
    """Whether the word's longest shorter dictionary prefix is a name (哈佛 + 大学, 广州 + 大学): an
    organisation word that starts with a common one is a kind of organisation (税务 + 局, 外语 + 学院)."""
    for end in range(len(word) - 1, 1, -1):
        prefix = word[:end]
        tag = dictionary_tag(prefix)
        if tag != OUT_OF_DICTIONARY:
            return tag[:2] in ("nr", "nt", "nz") or tag == "j" or is_place(prefix)
    return True  # no word of the dictionary starts it: a name of its own (联合国 aside)


def _transliterated(word: str, flag: str) -> bool:
    """A person's name written in transliteration characters only (马里奥, 罗斯, 米德尔): a foreign name
    (the dictionary tags 登基 and 称王 transliterations too), tagged one or of three characters at most."""
    tagged = flag == _TRANSLITERATED or (
        flag.startswith("nr") and len(word) <= 3 and _rare(word)
    )  # 伦理道德 and 道德 (3,241) are tagged nr too
    return tagged and all(char in _TRANSLITERATION for char in word)


def _titled(tagged: Tagged, at: int) -> bool:
    """Whether word ``at`` is a two-character word tagged a person with a title or an honorific next to
    it (经理刘海, 王芳女士): the word is a person's name."""
    _, word, flag = tagged[at]
    if len(word) != 2 or not flag.startswith("nr"):
        return False
    before = tagged[at - 1] if at > 0 and _adjacent(tagged, at - 1) else None
    after = tagged[at + 1] if at + 1 < len(tagged) and _adjacent(tagged, at) else None
    surnamed = word[0] in _SURNAMES and _rare(word)
    return surnamed and (
        (before is not None and before[1].endswith(_TITLES)) or (after is not None and after[1] in _HONORIFICS)
    )


def _transliteration_span(tagged: Tagged, at: int, pieces: bool) -> tuple[int, int]:
    """The words (start, end exclusive) of the person's name at word ``at``: jieba cuts a long
    transliteration into pieces (吉里 + 巴斯, 莱姆里 + 杰斯, 帕 + 特纳 + 赫; 马木留 + 克, 朱利叶 + 斯), and a
    piece alone names nothing. Adjacent single characters in transliteration characters continue a name
    (not a function word: 林奈 + 于), and so do names or new words on either side of a transliteration
    (``pieces``)."""

    def continues(index: int, place_suffix: bool = False) -> bool:
        _, word, flag = tagged[index]
        single = len(word) == 1 and flag[:1] not in _GRAMMAR_TAGS  # not 于 in 林奈于 (but 里 in 莱姆里杰斯)
        name_like = single or (pieces and (flag == OUT_OF_DICTIONARY or flag[:2] in ("nr", "ns")))
        if place_suffix and len(word) > 1 and word[-1] in PLACE_SUFFIXES:
            word = word[:-1]  # 塞克斯郡: the name ends in its place's suffix
        return name_like and all(char in _TRANSLITERATION for char in word)

    start, end = at, at + 1
    while pieces and start > 0 and _adjacent(tagged, start - 1) and continues(start - 1):
        start -= 1
    while end < len(tagged) and _adjacent(tagged, end - 1) and continues(end, place_suffix=True):
        end += 1
        if tagged[end - 1][1][-1] in PLACE_SUFFIXES:
            break
    return start, end


def _rare(word: str) -> bool:
    """A word tagged a person that the dictionary counts rarely enough to be a name (``PERSON_MAX_FREQUENCY``)."""
    return dictionary_frequency(word) <= PERSON_MAX_FREQUENCY


def _adjacent(tagged: Tagged, left: int) -> bool:
    """Whether word ``left`` and the next one touch (no punctuation or Latin text between them)."""
    return tagged[left][0] + len(tagged[left][1]) == tagged[left + 1][0]


def _common_word(given: str) -> bool:
    """A given name that is a word of its own the dictionary counts often and tags as no name: the
    surname before it is a character of a phrase (胡 + 萝卜, 曾 + 效力, 王 + 世子), not of a name."""
    tag = dictionary_tag(given)
    proper = tag == OUT_OF_DICTIONARY or tag[:2] in _HAN_KINDS or tag.startswith("nz")
    return len(given) >= 2 and not proper and dictionary_frequency(given) >= COMMON_GIVEN_FREQUENCY


def _glued(word: str) -> bool:
    """An out-of-dictionary word a function character edges: the HMM's glue ("这张", "日起"), no name."""
    return any(dictionary_tag(char)[:1] in _FUNCTION_TAGS for char in (word[0], word[-1]))


def _nominal(word: str, flag: str) -> bool:
    """A word that may go on a compound name: a noun of any kind, a name part, an unglued new word."""
    if flag == OUT_OF_DICTIONARY:
        return not _glued(word)
    return flag[:1] == "n" or flag in ("j", "x", "zg")


def _verb_glued(word: str, flag: str) -> bool:
    """A two-character new word that ends in a verb: the HMM glued a verb to the character before it
    (召入 + 后宫, 改设 + 罗店, 入读 + 东吴大学), no name's first word."""
    return flag == OUT_OF_DICTIONARY and len(word) == 2 and dictionary_tag(word[-1]).startswith("v")


def _downtown(parts: Tagged) -> bool:
    """A place and its centre (温哥华市中心, 新都区 + 中心): where in a city, not an organisation's name
    (温哥华世贸中心 is one)."""
    head = parts[-1][1]
    return head == "市中心" or (head == "中心" and len(parts) == 2 and is_place(parts[0][1]))


def _han_compounds(tagged: Tagged) -> dict[int, int]:
    """Compound names of adjacent words: a proper, place, abbreviated or new word, then nouns, the last
    ending in a name's head (粤海 + 茶楼, 勐海 + 晨光 + 茶厂, 湘味坊 alone): start index -> end index
    (exclusive), the longest from each start, none overlapping."""
    found: dict[int, int] = {}
    at = 0
    while at < len(tagged):
        offset, word, flag = tagged[at]
        end = None
        if flag in _NAME_STARTS and _nominal(word, flag) and not _verb_glued(word, flag):
            position, stop = offset, min(len(tagged), at + _MAX_COMPOUND_WORDS)
            for last in range(at, stop):
                there, part, tag = tagged[last]
                if there != position or not _nominal(part, tag):
                    break
                position += len(part)
                if (
                    part.endswith(_NAME_HEADS)
                    and position - offset >= 3
                    and (last > at or flag == OUT_OF_DICTIONARY)  # a dictionary word is a name by its own tag
                    and not _downtown(tagged[at : last + 1])
                ):
                    end = last + 1
        if end is None:
            at += 1
        else:
            found[at] = end
            at = end
    return found
