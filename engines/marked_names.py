"""Chinese names the text itself marks, for a KB nobody has curated: a dictionary tag misses most dish
names (虾饺 is a plain noun, 鱼香肉丝 a "person") and makers jieba cuts in two (深蓝 + 传感), but the
sentence around them says what they are. No model and no list drawn from a corpus; each rule is a
construction of general Chinese usage:

- a person by surname and title or honorific (张师傅, 李经理, 王教授);
- the agent of 由…掌勺 / 由…生产 (由王师傅掌勺: a person; 由深蓝传感出品: a maker), and the subject
  of 由…掌勺 (东坡肉由张师傅掌勺: a dish or the kitchen it names);
- a shop's signature dishes (招牌菜鱼香肉丝, 招牌是虾饺和叉烧包, 剁椒鱼头是镇店之宝), and the subject of a
  recipe's clause (片儿川用雪菜和肉片做浇头);
- a name in book-title marks (《红楼梦》) or, where the text says it names, in quotation marks or
  brackets (品牌为“深蓝传感”, “海底捞”火锅店; not a word stressed: “个位”).

Every rule keeps a common word out (a kind or a material, not a name: 由厂家生产, 由黏土制作, 招牌是服务)
and a phrase (a pronoun, a particle or a conjunction inside: 由我们生产, 店名叫「我们的家」)."""

from __future__ import annotations

import re

from engines.analysis import OUT_OF_DICTIONARY, dictionary_frequency, dictionary_tag
from engines.gazetteer import is_place
from engines.han_names import Tagged, is_surname

# A word the dictionary counts this often, tagged no name, is a common word (厂家, 服务), no name.
COMMON_FREQUENCY = 100
# ... a dish's word may be counted more often (东坡肉 260, 鱼头 310): dishes are words of the dictionary.
DISH_FREQUENCY = 500
MAX_AGENT_CHARS = 10
MAX_QUOTED_CHARS = 12  # in quotation marks or brackets; a longer quotation is a phrase or a sentence
MAX_TITLE_CHARS = 20  # in book-title marks

# What follows a surname to name a person by it (张师傅, 李经理): general Chinese usage.
PERSON_TITLES = frozenset(
    "师傅 经理 老板 主厨 厨师 店长 教授 医生 大夫 老师 先生 女士 总监 主任 院长 校长 律师 工程师".split()
)
_PERSON_VERBS = frozenset("掌勺 主理 主厨 掌厨 烹制 主刀".split())  # 由 X 掌勺: X cooks (a person)
_MAKER_VERBS = frozenset("生产 制造 出品 制作 研制 研发 加工 供应 供货 监制".split())  # 由 X 生产: X makes
_VERBS = _PERSON_VERBS | _MAKER_VERBS
_COMPANY_HEADS = ("公司", "集团", "厂", "企业", "中心")
_NAME_WORD_TAGS = frozenset({OUT_OF_DICTIONARY, "b", "j", "x"})  # with a proper tag: a one-word agent's tags
_SIGNATURE_MARKS = frozenset("招牌菜 招牌 拿手菜 特色菜 看家菜 主打菜 名菜 镇店之宝".split())
_LIST_JOINERS = frozenset("和 、 与 及 跟".split())
_COPULAS = frozenset("是 为 有".split())
# Tags (by first letter) of the words no name holds: pronoun, preposition, particle, conjunction,
# adverb, numeral, interjection, modal, onomatopoeia, locality (这道, 由, 的, 和, 都, 三...).
_PHRASE_TAGS = frozenset("rpucdmeyof")
_GRAMMAR_TAGS = frozenset("rpucye")  # pronoun, preposition, particle, conjunction, modal, interjection
_PROPER_TAGS = ("nr", "ns", "nt", "nz")
_QUOTED = re.compile(
    rf"《([^《》\n]{{1,{MAX_TITLE_CHARS}}})》|[「『“【]([^「」『』“”【】\n]{{1,{MAX_QUOTED_CHARS}}})[」』”】]"
)
# Quotation marks stress a word as often as they name (“个位”, “光圈”): a quoted name needs a naming word
# before it (名为“深蓝传感”, 品牌「片儿川」) or a kind of named thing right after it (“海底捞”火锅店).
_NAMING_BEFORE = re.compile(
    r"(?:名为|名叫|叫做|叫|称为|称作|简称|又称|俗称|别称|号称|取名|命名为|品牌|牌子|店名|菜名|品名|商标|招牌菜?|署名)[是为:]?$"
)
_NAMED_AFTER = re.compile(r"[\u3400-\u9fff]{0,2}?(?:品牌|牌|系列|店|餐厅|饭店|酒楼|茶楼|面馆|公司|集团|工作室)")
# A dish is what a recipe's clause is about: 片儿川用雪菜、笋片和肉片做浇头, 饺子用猪肉做馅.
_RECIPE = re.compile(
    r"(?:^|(?<=[\s,.;:!?，。；：！？、]))([\u3400-\u9fff]{2,5}?)用[\u3400-\u9fff、]{1,20}?[做作]"
    r"(?:浇头|馅料|馅儿|馅|汤底|汤头|底料|面码|卤子|酱汁)"
)
_ANY_TITLE = re.compile("|".join(sorted(PERSON_TITLES)))
_ANY_SIGNATURE = re.compile("|".join(sorted(_SIGNATURE_MARKS)))
_ANY_QUOTE = re.compile("[《「『“【]")
_QUOTED_CHARS = re.compile(r"[\w·\-. ]+")  # a name's characters: no comma, no sentence's punctuation
_HAN = re.compile(r"[\u3400-\u9fff]")


def marked_names(folded: str, tagged: Tagged) -> list[tuple[int, str, str]]:
    """(offset, name, kind) of the names the text marks, in text order; ``tagged`` are its jieba
    words (``engines.han_names.tagged_words``) and ``folded`` the normalized text they point into."""
    found = []  # each rule only where its mark's characters occur: most passages have none of them
    if _ANY_TITLE.search(folded):
        found += _titled_persons(tagged)
    if "由" in folded:
        found += _agents_and_subjects(tagged)
    if _ANY_SIGNATURE.search(folded):
        found += _signature_dishes(tagged)
    if "用" in folded:
        found += _recipe_dishes(folded)
    if _ANY_QUOTE.search(folded):
        found += _quoted(folded, tagged)
    return sorted(set(found))


def _titled_persons(tagged: Tagged) -> list[tuple[int, str, str]]:
    """张师傅 (one word) or 张 + 师傅 (two): a surname the title follows. A surname that is also a
    preposition or an adverb here is none (向医生咨询: "ask the doctor")."""
    found = []
    for at, (offset, word, tag) in enumerate(tagged):
        if at > 0 and _adjacent(tagged, at - 1) and _nominal(tagged[at - 1]):
            continue  # 王霖 + 华教授: the surname is a given name's end
        if len(word) in (3, 4) and word[-2:] in PERSON_TITLES and is_surname(word[:-2]):
            found.append((offset, word, "person"))
        elif (
            is_surname(word)
            and tag[:1] not in _PHRASE_TAGS
            and _adjacent(tagged, at)
            and tagged[at + 1][1] in PERSON_TITLES
        ):
            found.append((offset, word + tagged[at + 1][1], "person"))
    return found


def _agents_and_subjects(tagged: Tagged) -> list[tuple[int, str, str]]:
    """由 X 掌勺 / 由 X 生产: X is the words between 由 and the verb (a person for a kitchen's verb, a maker
    otherwise); for a kitchen's verb the words right before 由 are what X cooks (a dish or a kitchen)."""
    found = []
    for at, (_, word, _) in enumerate(tagged):
        if word != "由":
            continue
        verb = next((end for end in range(at + 2, min(len(tagged), at + 5)) if tagged[end][1] in _VERBS), None)
        if verb is None or not all(_adjacent(tagged, index) for index in range(at, verb)):
            continue
        if verb + 1 < len(tagged) and _adjacent(tagged, verb) and tagged[verb + 1][1].endswith(_COMPANY_HEADS):
            continue  # 由阜阳雨润肉类加工有限公司: the verb is a company name's trade
        parts = tagged[at + 1 : verb]
        agent = "".join(part for _, part, _ in parts)
        cooks = tagged[verb][1] in _PERSON_VERBS
        if len(agent) <= MAX_AGENT_CHARS and _name_like(parts) and not is_place(agent):
            found.append((parts[0][0], agent, "person" if cooks else "organisation"))
        if cooks and (subject := _words_before(tagged, at, DISH_FREQUENCY)):
            found.append((subject[0][0], "".join(part for _, part, _ in subject), "proper"))
    return found


def _signature_dishes(tagged: Tagged) -> list[tuple[int, str, str]]:
    """招牌菜鱼香肉丝 / 招牌是虾饺和叉烧包: the dishes after a signature mark (and 是, 为); 剁椒鱼头是镇店之宝:
    the words of the clause before 是 and the mark."""
    found = []
    for at in range(len(tagged)):
        end = _mark_end(tagged, at)
        if end is None:
            continue
        if end < len(tagged) and tagged[end][1] in _COPULAS and _adjacent(tagged, end - 1):
            end += 1
        found += _dish_list(tagged, end)
        if at >= 2 and tagged[at - 1][1] in _COPULAS and _adjacent(tagged, at - 1):
            subject = _words_before(tagged, at - 1, DISH_FREQUENCY)
            if subject:
                found.append((subject[0][0], "".join(part for _, part, _ in subject), "proper"))
    return found


def _mark_end(tagged: Tagged, at: int) -> int | None:
    """The end (exclusive) of the signature mark the words from ``at`` spell (招牌菜; 镇店 + 之宝), or None."""
    text, end, found = "", at, None
    while end < len(tagged) and end - at < 3 and (end == at or _adjacent(tagged, end - 1)):
        text += tagged[end][1]
        end += 1
        if text in _SIGNATURE_MARKS:
            found = end  # the longest: 招牌 + 菜 is 招牌菜
        if not any(mark.startswith(text) for mark in _SIGNATURE_MARKS):
            break
    return found


def _dish_list(tagged: Tagged, at: int) -> list[tuple[int, str, str]]:
    """The dishes of a list starting at word ``at`` (虾饺 和 叉烧包): each a word, with the single
    characters jieba cut off its end (宫保鸡 + 丁), joined by 和、与、及."""
    found = []
    while at < len(tagged) and _adjacent(tagged, at - 1):
        end = at + 1
        while end < len(tagged) and _adjacent(tagged, end - 1) and len(tagged[end][1]) == 1 and _nominal(tagged[end]):
            end += 1
        parts = tagged[at:end]
        dish = "".join(part for _, part, _ in parts)
        if len(dish) < 2 or not all(_nominal(part) for part in parts) or _common(parts, DISH_FREQUENCY):
            break
        found.append((parts[0][0], dish, "proper"))
        if end + 1 < len(tagged) and tagged[end][1] in _LIST_JOINERS and _adjacent(tagged, end):
            at = end + 1
            continue
        break
    return found


def _words_before(tagged: Tagged, at: int, max_frequency: int = COMMON_FREQUENCY) -> Tagged:
    """The words right before word ``at`` that read as one name (剁 + 椒 + 鱼头; 这道 + 东坡肉: 东坡肉):
    touching, a name's words back to the clause's start or a phrase's word, two to six characters, not a
    common word."""
    start = at
    while start > 0 and _adjacent(tagged, start - 1) and at - start < 4 and _nominal(tagged[start - 1]):
        start -= 1
    parts = tagged[start:at]
    name = "".join(part for _, part, _ in parts)
    if not 2 <= len(name) <= 6 or _common(parts, max_frequency):
        return []
    return parts


def _recipe_dishes(folded: str) -> list[tuple[int, str, str]]:
    """片儿川用雪菜、笋片和肉片做浇头: the clause's subject, when it is no common word or phrase (我们用…)."""
    found = []
    for match in _RECIPE.finditer(folded):
        dish = match.group(1)
        tag = dictionary_tag(dish)
        if any(dictionary_tag(char)[:1] in "rpcu" for char in (dish[0], dish[-1])):
            continue  # 这 + …, …的: a phrase's edge
        if tag != OUT_OF_DICTIONARY and (tag[:1] in _PHRASE_TAGS or dictionary_frequency(dish) >= DISH_FREQUENCY):
            continue
        found.append((match.start(1), dish, "proper"))
    return found


def _quoted(folded: str, tagged: Tagged) -> list[tuple[int, str, str]]:
    """《名》 is a work's name; 「名」, 『名』, “名”, 【名】 one where the text says it names (``_NAMING_BEFORE``,
    ``_NAMED_AFTER``): some Han text, a name's characters only, no pronoun or particle (“我们的”)."""
    found = []
    words = {offset: (word, tag) for offset, word, tag in tagged}
    for match in _QUOTED.finditer(folded):
        book = match.group(1) is not None
        name = (match.group(1) if book else match.group(2)).strip()
        start = match.start(1) if book else match.start(2)
        if len(name) < 2 or not _HAN.search(name) or not _QUOTED_CHARS.fullmatch(name):
            continue
        parts = [(offset, *words[offset]) for offset in range(start, start + len(name)) if offset in words]
        if not book and not (
            _NAMING_BEFORE.search(folded[max(0, match.start() - 4) : match.start()])
            or _NAMED_AFTER.match(folded, match.end())
        ):
            continue
        if not book and any(tag[:1] in _GRAMMAR_TAGS for _, _, tag in parts):
            continue  # “我们的”: a phrase quoted
        found.append((start, name, "proper"))
    return found


def _name_like(parts: Tagged) -> bool:
    """An agent's words: no phrase's word (由我们, 由国家统一); one word a name by its tag; several, the
    first proper, new or rare (深蓝 + 传感, 冰川 + 冷链), not a common noun before another (由当地居民)."""
    if not parts or not all(_nominal(part) for part in parts) or _common(parts, COMMON_FREQUENCY):
        return False
    _, first, tag = parts[0]
    if len(parts) == 1:  # 由日立, 由张师傅; not 由黏土 (a material), 由工厂 (a kind)
        return tag[:2] in _PROPER_TAGS or tag in _NAME_WORD_TAGS
    return tag == OUT_OF_DICTIONARY or tag[:2] in _PROPER_TAGS or dictionary_frequency(first) < COMMON_FREQUENCY


def _nominal(part: tuple[int, str, str]) -> bool:
    """A word a name may hold: none of a phrase's function words, no verb but a new word's."""
    _, word, tag = part
    if tag == OUT_OF_DICTIONARY:
        return not any(dictionary_tag(char)[:1] in _PHRASE_TAGS for char in (word[0], word[-1]))
    return tag[:1] not in _PHRASE_TAGS and not tag.startswith("v")


def _common(parts: Tagged, max_frequency: int) -> bool:
    """One word the dictionary counts at least ``max_frequency`` times and tags as no name: a kind."""
    if len(parts) != 1:
        return False
    _, word, tag = parts[0]
    return tag != OUT_OF_DICTIONARY and tag[:2] not in _PROPER_TAGS and dictionary_frequency(word) >= max_frequency


def _adjacent(tagged: Tagged, left: int) -> bool:
    """Whether word ``left`` and the next one touch (no punctuation or Latin text between them)."""
    return 0 <= left < len(tagged) - 1 and tagged[left][0] + len(tagged[left][1]) == tagged[left + 1][0]
