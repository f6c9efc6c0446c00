"""JioNLP's package data, read without importing jionlp (its import loads its whole toolkit and prints
a banner): its gazetteer (``engines.gazetteer``) and its general dictionary of Chinese words."""

from __future__ import annotations

import importlib.util
import zipfile
from functools import cache
from pathlib import Path


def dictionary_file(name: str) -> Path:
    """A file of jionlp's ``dictionary`` folder."""
    spec = importlib.util.find_spec("jionlp")
    if spec is None or spec.origin is None:
        raise ModuleNotFoundError("jionlp is not installed: pip install -r requirements.txt")
    return Path(spec.origin).parent / "dictionary" / name


def zipped_text(name: str) -> str:
    """The text of the file ``name``.txt that the folder keeps zipped as ``name``.zip."""
    with zipfile.ZipFile(dictionary_file(f"{name}.zip")) as archive:
        return archive.read(f"{name}.txt").decode("utf-8")


@cache
def defined_words() -> frozenset[str]:
    """The 33,828 words the Xinhua dictionary defines (JioNLP's chinese_word_dictionary: those still in
    use): a two-character word among them is a common word (谢恩, 沙丘, 恩爱) far more often than a name."""
    return frozenset(line.split("\t", 1)[0] for line in zipped_text("chinese_word_dictionary").splitlines())
