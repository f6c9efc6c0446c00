"""Names in Latin script: codes and capitalized names by the rules of English capitalization. The
expected names are written by hand."""

from __future__ import annotations

import pytest

from engines.latin_names import FUNCTION_WORDS, capitalized_names, codes


def names(text: str, query: bool = False) -> set[str]:
    found = capitalized_names(text, lambda word: word.lower() in FUNCTION_WORDS, query)
    return {label.lower() for _, label in found}


def code_names(text: str) -> set[str]:
    return {code.lower() for _, code in codes(text)}


def test_headings_sentence_starts_and_section_labels_make_no_name():
    text = (
        "Order Problems\n"
        "Order problems are rare. Harbor Noodle House in Seattle is run by Maria Lopez.\n"
        "RESULTS Ibuprofen lowered the pain. Exposures Sepsis was common; exposures to sepsis were recorded."
    )
    assert names(text) == {"harbor noodle house", "maria lopez"}


def test_a_code_sheds_a_hyphenated_modifier_and_a_word_with_a_number_is_no_code():
    text = "Sfrp5-dependent signalling needs IND-7 and CD28/cytotoxic cells at impulses/100."
    assert code_names(text) == {"sfrp5", "ind-7", "cd28"}


def test_a_code_sheds_a_possessive_and_a_negating_prefix():
    text = "p53's targets, anti-CD19 antibodies and non-V600E mutants"
    found = codes(text)
    assert {code.lower() for _, code in found} == {"p53", "cd19", "v600e"}
    assert all(text[position : position + len(code)] == code for position, code in found)  # where the code is


def test_a_residue_and_a_word_with_its_footnote_are_no_codes():
    text = "Akt is phosphorylated at Ser473 and Tyr-260 near Notch1 (see function1); the Val30Met variant differs."
    assert code_names(text) == {"notch1", "val30met"}


def test_codes_are_three_characters_or_more_and_a_slash_lists_codes():
    text = "Oct4/Sox2 cells, M4 screws, firmware v2.1, order WC-2026-XXXXXX and an E27 socket."
    assert code_names(text) == {"oct4", "sox2", "e27"}


def test_latin_names_are_of_latin_letters_and_end_at_a_code_or_a_unit():
    text = (
        "The GuardCam 2K Indoor Camera uses 2.4 GHz Wi-Fi; see Error E-104 on the PortaLock Pro PPR-9087. "
        "In 2025 Skyline Homes moved. Dairy Queen的总公司位于明尼苏达州。 PCR-amplified DNA, CaMKII-dependent BDNF."
    )
    assert names(text) == {"guardcam 2k indoor camera", "portalock pro", "skyline homes", "dairy queen"}


def test_a_camel_case_word_is_a_name_of_its_own():
    assert names("The AirSense SKY-30452 pairs with GuardCam, not with ChIP or mTOR.") == {"airsense", "guardcam"}


def test_a_section_label_and_a_preposition_start_no_name():
    text = "Conclusions Molecular profiling helps. Results US adults gained. Unlike Escherichia coli, it grew."
    assert names(text) == set()


def test_a_bilingual_heading_and_a_labels_next_word_make_no_name():
    text = (
        "错误码速查表 / Error Code Reference\n当设备指示灯闪红时请查表。\nDESIGN Prospective Longitudinal cohort study."
    )
    assert names(text) == set()


def test_a_joiner_continues_a_name_between_plain_capitalized_words():
    text = (
        "Data came from the National Center for Health Statistics, the University of the West of England, "
        "the Department of Health and Place de Clichy, as Harald von Boehmer said."
    )
    assert names(text) == {
        "national center for health statistics",
        "university of the west of england",
        "department of health",
        "place de clichy",
        "harald von boehmer",
    }


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        # "of" after a name of several words that is no institution's: a qualifier
        ("The ESP-12 is made by Bellaria Macchine of Milan.", {"bellaria macchine"}),
        ("Tony Epstein and Yvonne Barr found it.", {"tony epstein", "yvonne barr"}),  # "and" joins no name
        ("We measured the CI for AD in each arm.", set()),  # a joiner between acronyms joins nothing
    ],
)
def test_a_qualifier_a_list_and_acronyms_are_no_joined_name(text, expected):
    assert names(text) == expected


def test_a_sentence_start_before_an_acronym_or_a_joiner_is_no_part_of_a_name():
    text = (
        "Increased HCV replication was seen. Inhibition of EGFR slowed it. Several Danish cohorts agreed. "
        "The Department of Health paid."
    )
    assert names(text) == {"department of health"}


def test_a_sentence_start_the_passage_capitalizes_elsewhere_stays_in_the_name():
    assert names("Apple ID is needed. Sign in with the Apple ID of the account owner.") == {"apple id"}


def test_abbreviations_side_by_side_are_no_name_unless_a_roman_numeral_ends_them():
    assert names("We measured HCV RNA and the ICU LOS of NHANES III participants.") == {"nhanes iii"}


def test_a_middle_initial_continues_a_name_and_a_sentences_period_ends_one():
    text = "Franklin D. Roosevelt met John F. Kennedy in Washington D.C. and took Vitamin D. The end."
    assert names(text) == {"franklin d. roosevelt", "john f. kennedy", "washington d.c.", "vitamin d"}


def test_two_codes_joined_by_a_hyphen_are_two_codes_and_a_cell_line_stays_one():
    text = "The HMGB1-TLR4 axis and FGFR2-rs2981582 were studied in B16-F10 and IDI2-AS1 cells."
    assert code_names(text) == {"hmgb1", "tlr4", "fgfr2", "rs2981582", "b16-f10", "idi2-as1"}


def test_a_word_run_into_a_code_a_footnote_and_a_time_are_no_codes():
    text = "Pdcd1 expressionSatb1 cells and gammaH2AX foci in the United Kingdom.3 since the mid-1990s."
    assert code_names(text) == {"pdcd1", "satb1", "gammah2ax"}
