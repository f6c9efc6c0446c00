"""Names in a passage's Latin script: identifiers and codes (``PPR-9087``), capitalized multi-word names
(``PortaLock Pro``, ``University of the West of England``) and camel-case brands (``AirSense``). No
model: the rules are those of English capitalization. A function word, a heading's, a sentence start's
or a section label's capitals make no name, and neither does a word and its number ("function1"), an
amino acid's position ("Ser473") or a modifier ("CaMKII-dependent", "anti-CD19", "p53's").
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass

from engines.analysis import han_runs, latin_compounds

# English closed-class words, numerals and quantifiers: capitalized by their place in a sentence or a title ("Do
# I", "Which Wi-Fi", "Several Danish"), they start or end no name, and a query's n-gram of them only is no name.
FUNCTION_WORDS = frozenset(
    "a about above after again against all am an and any are as at be because been before being below between "
    "both but by can could did do does doing down during each either few for from had has have having he her "
    "here hers him his how i if in into is it its itself just may me might more most must my neither no nor not "
    "of off on once only or other our ours out over own same shall she should so some such than that the their "
    "them then there these they this those through to too under until up upon very was we were what when where "
    "whether which while who whom whose why will with within without would yet you your yours although however thus "
    "therefore moreover furthermore hence whereas though since unless one two three four five six seven eight nine "
    "ten unlike despite among amongst across toward towards via per versus vs including following regarding "
    "concerning beyond besides behind beside near inside outside around along amid onto throughout till using "
    "many much several various numerous every another fewer least".split()
)
# The section labels of a structured abstract or report ("Conclusions Molecular profiling...", "Results US
# adults..."): at a sentence's start, capitalized or not, a label is no part of a name.
SECTION_LABELS = frozenset(
    "abstract background introduction objective objectives aim aims purpose context importance method methods "
    "design setting settings participants patients subjects intervention interventions exposure exposures "
    "measurements outcome outcomes result results findings conclusion conclusions interpretation implications "
    "implementation discussion summary significance funding limitations".split()
)
# The lower-case words inside a name ("Department of Health", "Place de Clichy", "Harald von Boehmer"); "and"
# is none: "Tony Epstein and Yvonne Barr" are two names far more often than one ("Food and Drug Administration").
JOINERS = frozenset("of for de du der van von".split())
_IN_NAME = JOINERS | {"the"}  # "University of the West"
# The nouns of an institution, a register or an instrument, which "of" or "for" continues after a name of several
# words ("National Center for Health Statistics", "Cochrane Central Register of Controlled Trials"); after other
# words they start a qualifier ("Bellaria Macchine of Milan").
_INSTITUTIONS = frozenset(
    "academy agency assessment association bank board bureau center centers centre classification college "
    "commission committee council database department encyclopedia federation foundation fund index initiative "
    "institute institutes inventory journal kingdom league library manual ministry museum network office "
    "organisation organization program programme register registry republic scale school service society study "
    "survey trust union university".split()
)
_CODE_MODIFIER = re.compile(r"(?:[-/][a-z]{4,})+$")  # "-dependent", "-mediated", "-containing" after a code
_CODE_PREFIX = re.compile(r"^(?:anti|non)-", re.IGNORECASE)  # "anti-CD19", "non-V600E": the code is CD19, V600E
_POSSESSIVE = re.compile(r"['\u2019]s$")  # "p53's"
_MODIFIER = re.compile(r"-[a-z]{4,}$")  # "CaMKII-dependent", "HBV-induced": a modifier, no part of a name
_PUNCTUATION = "\"'()[]{}:;,.!?#*-"
_LINE = re.compile(r"[^\n]+")
_CODE_PART = re.compile(r"[-/.]")
_ASCII_LETTER = re.compile(r"[A-Za-z]")
_DIGIT = re.compile(r"\d")
_SENTENCE_PUNCTUATION = re.compile(r"[,.;:!?，。；：！？、]")
_AFTER_NUMBER = re.compile(r"\d[ \t]+$")
_CAMEL_CASE = re.compile(r"(?<![\w&-])[A-Z][a-z]+(?:[A-Z][a-z]+)+(?![\w&-])")  # PortaLock, GuardCam: a brand's name
_LOOK_BACK = 40  # characters before a word that a label or a number before it can take (a search from 0 is O(n))
_LABEL_BEFORE = re.compile(r"(?<![\w&-])[A-Z]{4,}[ \t]+$")  # "RESULTS Pravastatin": what follows a section label
_CAPITALIZED_WORD = re.compile(r"(?<![\w&-])[A-Z][a-z\u00df-\u00ff]+(?![\w&-])")
_PLAIN_CAPITALIZED = re.compile(r"[A-Z][a-z\u00df-\u00ff][\w&-]*")  # "Health", "Wi-Fi"; not "EGFR", "B"
_ACRONYM = re.compile(r"[A-Z][A-Z0-9]*[A-Z][A-Z0-9]*s?")  # "HCV", "HSCs"
_ABBREVIATION = re.compile(r"[A-Z]|[a-z]{0,2}[A-Z][A-Z0-9]{1,3}s?")  # "T", "RNA", "SMCs", "rRT", "mGluR" is none
_ROMAN = re.compile(r"[IVX]+")  # "NHANES III", "APACHE II"
_VERSION = re.compile(r"[vV]\d+(?:\.\d+)+")
_PLACEHOLDER = re.compile(r"[xX]{3,}")
_LOWER_WORD = re.compile(r"[a-z]{5,}")
# "function1", "cells6", "Kingdom.3": a word and its footnote or count
_NUMBERED_WORD = re.compile(r"[a-z]{5,}\d+|[A-Za-z][a-z]{4,}\.\d+")
_TIME = re.compile(r"[a-z]{2,5}-(?:1[5-9]|20)\d\ds?")  # "mid-1990s", "pre-2000": a time, no code
# A lower-case word run into a code ("expressionSatb1", "modelsCOMMD1"), as a text's lost space leaves it; a
# Greek letter's name is part of one ("gammaH2AX", "deltaEF1")
_GLUED_WORD = re.compile(r"(?!alpha|beta|gamma|delta|kappa|epsilon|lambda|sigma|theta|omega)[a-z]{6,}(?=[A-Z])")
_AMINO_ACIDS = "ala arg asn asp cys gln glu gly his ile leu lys met phe pro ser thr trp tyr val"
_RESIDUE = re.compile(rf"(?:{'|'.join(_AMINO_ACIDS.split())})-?\d{{2,}}", re.IGNORECASE)  # "Ser473": a position
_LOWER_CASE_WORD = re.compile(r"(?<![\w&])[a-z\u00df-\u00ff][\w&]*")
# Capitalized words (hyphenated ones whole: "Wi-Fi", "E-104"), a joiner between two ("Bank of China", "University
# of the West") and, between them, a number with its unit ("GuardCam 2K Indoor Camera"). Latin letters only:
# Chinese after a name is no part of it ("Queen的总公司").
_NAME_CHAR = r"[0-9A-Za-z\u00c0-\u024f&]"
_JOINER = rf"(?:{'|'.join(sorted(JOINERS))})[ \t]+(?:the[ \t]+)?"
_CAPITALIZED_NAME = re.compile(
    rf"\b[A-Z]{_NAME_CHAR}*(?:-{_NAME_CHAR}+)*(?:[ \t]+(?:{_JOINER})?"
    rf"(?:(?:[A-Z]\.)+|[A-Z]{_NAME_CHAR}*|\d{_NAME_CHAR}*[A-Za-z]{_NAME_CHAR}*)(?:-{_NAME_CHAR}+)*)+(?!{_NAME_CHAR})"
)
_NAME_WORD = re.compile(r"\S+")
_INITIAL_AT_END = re.compile(r"( [A-Z])\.$")  # "Vitamin D. The": a sentence's period, no initial's


def codes(text: str) -> list[tuple[int, str]]:
    """(position, code) of the compounds that start with a letter and hold a digit: product codes, model
    numbers (``is_code``). A lower-case word hyphenated to a code describes it ("Sfrp5-dependent",
    "anti-CD19", "p53's": sfrp5, cd19, p53); codes joined by a slash are a list of codes ("Oct4/Sox2"), and
    so are two of four characters or more joined by a hyphen ("HMGB1-TLR4"; "B16-F10" is one cell line); a
    lower-case word run into a code is no part of it ("expressionSatb1", where a space was lost)."""
    found = []
    for match in latin_compounds(text):
        position = match.start()
        for part in match.group().split("/"):  # "Oct4/Klf4": two codes, no name of a list
            bare = _CODE_MODIFIER.sub("", _POSSESSIVE.sub("", part))
            prefix = _CODE_PREFIX.match(bare) or _GLUED_WORD.match(bare)
            code = bare[prefix.end() :] if prefix else bare
            at = position + (prefix.end() if prefix else 0)
            pair = code.split("-")
            if len(pair) == 2 and all(len(side) >= 4 and is_code(side) for side in pair):  # "HMGB1-TLR4": two
                found += [(at, pair[0]), (at + len(pair[0]) + 1, pair[1])]
            elif is_code(code):
                found.append((at, code))
            position += len(part) + 1
    return found


def is_code(word: str) -> bool:
    """A code starts with a letter, holds a digit and has three characters or more ("M4", "T3": a size,
    a grade, a figure's panel). A compound that starts with a long lower-case word is a word and a number
    ("impulses-100", "function1", "Kingdom.3"; "Notch1" is a gene); an amino acid's position ("Ser473",
    "Tyr-260") is a place in a protein; a version ("v2.1"), a placeholder ("WC-2026-XXXXXX") and a time
    ("mid-1990s") name nothing."""
    lead = _CODE_PART.split(word, maxsplit=1)[0]
    return (
        len(word) >= 3
        and word[0].isalpha()
        and any(char.isdigit() for char in word)
        and not _LOWER_WORD.fullmatch(lead)
        and not _NUMBERED_WORD.fullmatch(word)
        and not _TIME.fullmatch(word)
        and not _RESIDUE.fullmatch(word)
        and not _VERSION.fullmatch(word)
        and not _PLACEHOLDER.search(word)
    )


def capitalized_names(text: str, is_function_word: Callable[[str], bool], query: bool) -> list[tuple[int, str]]:
    """(position, label) of the runs of two or more capitalized words that are no function word
    (``is_function_word``): "Do I", "The", "Which" are capitalized by their place in a sentence or a title
    alone, so they end a name ("How Do I Reset The PortaLock Pro" names only the PortaLock Pro). A run of
    words the passage also writes in lower case is a heading's or a sentence start's common words ("Battery
    Pack" over "the battery pack"), no name: one of its words must be capitalized wherever the passage
    writes it; an all-capital word before a capitalized one is a label and ends a run ("RESULTS
    Pravastatin"), and so do a section label at a sentence's start ("Conclusions Molecular profiling"), a
    code ("PortaLock Pro PPR-9087"), an amino acid's position and a hyphenated modifier ("PCR-amplified DNA").
    A joiner continues a name (``_joins``), and so does a middle initial ("Franklin D. Roosevelt"). A
    passage's heading names only what its text names too (a query may be written in title case). A word
    in camel case is a brand's or a product's name on its own ("AirSense", "GuardCam")."""
    found: list[tuple[int, str]] = []
    capitals = _Capitals.of(text)
    headings = [] if query else [line for line in _LINE.finditer(text) if _is_heading(line.group(), is_function_word)]
    heading_spans = {line.span() for line in headings}
    in_text = "\n".join(line.group() for line in _LINE.finditer(text) if line.span() not in heading_spans)
    for match in _CAPITALIZED_NAME.finditer(text):
        run: list[re.Match[str]] = []
        words = [*_NAME_WORD.finditer(match.group())]
        for at, word in enumerate([*words, None]):
            if word is not None and word.group()[0].isdigit():
                if run:
                    run.append(word)  # inside a name only: dropped from its ends
                continue
            if word is not None and word.group() in _IN_NAME and run and _joins(word.group(), run, words[at + 1 :]):
                run.append(word)
                continue
            if (
                word is None
                or word.group() in _IN_NAME
                or is_function_word(word.group())
                or _label(word.group(), words[at + 1 :])
                or is_code(word.group())
                or _RESIDUE.fullmatch(word.group()) is not None
                or _MODIFIER.search(word.group()) is not None
                or (word.group().lower() in SECTION_LABELS and _starts_sentence(text, match.start() + word.start()))
            ):
                run = capitals.trimmed(_without_joiners(run), match.start())
                name = _INITIAL_AT_END.sub(r"\1", " ".join(part.group() for part in run))
                start = match.start() + (run[0].start() if run else 0)
                heading = any(line.start() <= start < line.end() for line in headings) and name not in in_text
                if (
                    len(run) >= 2
                    and not heading
                    and any(not capitals.lower(part.group()) for part in run)
                    and not _abbreviations(run)
                ):
                    found.append((start, name))
                run = []
            else:
                run.append(word)
    covered = [(start, start + len(name)) for start, name in found]
    for camel in _CAMEL_CASE.finditer(text):  # one word of its own: "the AirSense SKY-30452"
        if not any(start <= camel.start() < end for start, end in covered):
            found.append((camel.start(), camel.group()))
    return found


def _joins(joiner: str, run: list[re.Match[str]], after: list[re.Match[str]]) -> bool:
    """Whether ``joiner`` between the ``run`` so far and the words ``after`` it continues one name: between
    two plain capitalized words ("Bank of China", "Place de Clichy"; not "CI for AD", "Inhibition of EGFR"),
    "the" after "of" or "for" ("University of the West"). After a name of two words or more, "of" and "for"
    continue an institution's name ("National Center for Health Statistics") and start a qualifier of any
    other ("Bellaria Macchine of Milan", "the PortaLock Pro of Skyline Home")."""
    if joiner == "the":
        return run[-1].group() in ("of", "for") and bool(after) and bool(_PLAIN_CAPITALIZED.fullmatch(after[0].group()))
    last = run[-1].group()
    if last in JOINERS or not _PLAIN_CAPITALIZED.fullmatch(last) or not after:
        return False
    following = after[0].group()
    if not (_PLAIN_CAPITALIZED.fullmatch(following) or (following == "the" and joiner in ("of", "for"))):
        return False
    segment = len(run) - next((at for at in range(len(run) - 1, -1, -1) if run[at].group() in _IN_NAME), -1) - 1
    return joiner not in ("of", "for") or segment == 1 or last.lower() in _INSTITUTIONS


def _abbreviations(run: list[re.Match[str]]) -> bool:
    """Whether a run is abbreviations only ("HCV RNA", "ICU LOS", "MAPK JNK"): terms written side by
    side, not a name, unless a Roman numeral ends it ("NHANES III", "APACHE II")."""
    words = [word.group() for word in run]
    return all(_ABBREVIATION.fullmatch(word) for word in words) and not _ROMAN.fullmatch(words[-1])


def _without_joiners(run: list[re.Match[str]]) -> list[re.Match[str]]:
    """The run without the joiners at its ends ("Inhibition of" once its first word is trimmed)."""
    start, end = 0, len(run)
    while start < end and run[start].group() in _IN_NAME:
        start += 1
    while end > start and run[end - 1].group() in _IN_NAME:
        end -= 1
    return run[start:end]


def _is_heading(line: str, is_function_word: Callable[[str], bool]) -> bool:
    """A line of two or more words each capitalized unless a function word ("Order Problems", "How
    To Pair The Hub"): a heading, whose capitals say nothing of a name. Its codes and Chinese words
    do not count ("PortaLock Pro PPR-9087 - Installation Manual v2.1", "错误码速查表 / Error Code
    Reference"); a line with Chinese sentence punctuation is text."""
    if next(han_runs(line), None) is not None and _SENTENCE_PUNCTUATION.search(line):
        return False  # Chinese text that names something in English, not a bilingual heading
    words = [word for word in _NAME_WORD.findall(line) if _ASCII_LETTER.search(word) and not _DIGIT.search(word)]
    content = [word for word in words if not is_function_word(word.strip(_PUNCTUATION))]
    return len(content) >= 2 and all(not word[:1].islower() and word.isascii() for word in content)


@dataclass(frozen=True)
class _Capitals:
    """What a passage says of its capitals: the words it writes in lower case, and the capitalized words
    it writes where their place does not capitalize them."""

    text: str
    lower_case: frozenset[str]
    mid_sentence: frozenset[str]

    @classmethod
    def of(cls, text: str) -> _Capitals:
        mid_sentence = (m.group() for m in _CAPITALIZED_WORD.finditer(text) if not _placed(text, m.start()))
        return cls(text, frozenset(_LOWER_CASE_WORD.findall(text)), frozenset(mid_sentence))

    def lower(self, word: str) -> bool:
        return word.lower() in self.lower_case

    def trimmed(self, run: list[re.Match[str]], offset: int) -> list[re.Match[str]]:
        """A run of capitalized words (matched at ``offset``) without what is no part of its name: a
        number with its unit at its end ("GuardCam 2K"), a first word capitalized by its place (one the
        passage writes in lower case: "Exposures Anticoagulation..."; one it capitalizes nowhere else and
        that stands before an acronym or a joiner: "Increased HCV", "Inhibition of Notch"; a plain word
        after a label that the passage capitalizes nowhere else: "DESIGN Prospective cohort"), or a
        number's unit ("2.4 GHz Wi-Fi"; not "In 2025 Skyline Homes")."""
        while run and run[-1].group()[0].isdigit():
            run = run[:-1]
        if not run:
            return run
        first, position = run[0].group(), offset + run[0].start()
        only_here = first not in self.mid_sentence
        labelled = _labelled(self.text, position)
        plain = labelled and first[1:].islower() and only_here
        second = run[1].group() if len(run) > 1 else ""
        leads = only_here and (_ACRONYM.fullmatch(second) is not None or second in JOINERS)
        if _placed(self.text, position) and (self.lower(first) or plain or leads):
            return self.trimmed(_without_joiners(run[1:]), offset)
        if len(first) <= 3 and _AFTER_NUMBER.search(self.text, max(0, position - _LOOK_BACK), position):
            return self.trimmed(_without_joiners(run[1:]), offset)
        return run


def _placed(text: str, position: int) -> bool:
    """Whether a word at ``position`` is capitalized by its place: it starts a sentence or follows a label."""
    return _starts_sentence(text, position) or _labelled(text, position)


def _labelled(text: str, position: int) -> bool:
    """Whether a section label ("RESULTS") stands right before ``position``."""
    return _LABEL_BEFORE.search(text, max(0, position - _LOOK_BACK), position) is not None


def _starts_sentence(text: str, position: int) -> bool:
    """Whether a word at ``position`` starts the text, a line or a sentence."""
    before = text[:position].rstrip(" \t")
    return not before or before[-1] in ".!?:;\n\r"


def _label(word: str, after: list[re.Match[str]]) -> bool:
    """An all-capital word of four letters or more before a word that is not: a section label
    ("CONCLUSIONS Ibuprofen is as effective..."), no part of a name."""
    return len(word) >= 4 and word.isalpha() and word.isupper() and bool(after) and not after[0].group().isupper()
