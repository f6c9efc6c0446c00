"""Which files of a folder are documents, and the URIs they get."""

import pytest

from knowledge.ingestion.files import discover_files


def test_a_folders_supported_files_are_documents_named_from_the_folder(tmp_path):
    root = tmp_path / "handbook"
    for name in ["a.md", "sub/b.txt", "sub/b.txt.meta.json", "c.exe", ".hidden.md", ".vocabulary/terms.csv",
                 ".git/notes.md", "sub/.cache/d.md"]:  # fmt: skip
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text("text")
    found = discover_files([root])
    assert [source.source_uri for source in found] == [
        "handbook/a.md",
        "handbook/sub/b.txt",
    ]  # no sidecar, hidden or .exe


def test_a_file_given_directly_is_named_by_itself_even_when_hidden(tmp_path):
    path = tmp_path / ".notes.md"
    path.write_text("text")
    assert [source.source_uri for source in discover_files([path])] == [".notes.md"]


def test_a_missing_path_is_refused(tmp_path):
    with pytest.raises(FileNotFoundError, match="no such file or directory"):
        discover_files([tmp_path / "absent"])
