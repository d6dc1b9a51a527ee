"""The project's files speak of the project only: no issue numbers, no loaned machines or
working sessions, no one machine's absolute paths. Translations a model wrote (the collected runs'
hyps.*.txt) and JSON records keep the words and paths they were made with and are left out."""

import re
import shutil
import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]

# Each pattern is spelled so that this file does not match it (a character class or an optional
# group in the middle of the word).
OUTSIDE_WORDS = re.compile(
    "|".join(
        [
            r"/wor[k]/",
            r"/far[m]/",
            r"/roo[t]/",
            r"/hom[e]/[a-z_][a-z0-9_.-]*/",
            r"\bissu[e] #?[0-9]+",
            r"\blea[s]e\b",
            r"\blen[t]\b",
            r"devic[e] tool",
            r"workin[g] turn",
            r"\b(this|that|the last|a later|next) sessio[n]",
        ]
    ),
    re.IGNORECASE,
)


def project_files() -> list[str]:
    """The tracked files that should speak of the project only."""
    if shutil.which("git") is None:
        pytest.skip("git is not installed")
    listed = subprocess.run(["git", "ls-files", "-z"], cwd=REPO, capture_output=True, check=False)
    if listed.returncode != 0:
        pytest.skip("not a git checkout")
    names = listed.stdout.decode("utf-8").split("\0")
    return [
        name
        for name in names
        if name and not Path(name).name.startswith("hyps.") and not name.endswith(".json")
    ]


def outside_words(text: str) -> list[tuple[int, str]]:
    """(line number, line) of each line of `text` that matches OUTSIDE_WORDS."""
    return [
        (number, line.strip())
        for number, line in enumerate(text.splitlines(), start=1)
        if OUTSIDE_WORDS.search(line)
    ]


def test_the_pattern_catches_what_it_should_and_spares_the_project_words():
    caught = [
        "see issue " + "21",
        "issue" + " #7",
        "the lea" + "se's probe",
        "no GPU was le" + "nt",
        "through the device" + " tool",
        "a working" + " turn",
        "a later sess" + "ion's machine",
        "data at /" + "work/main/data",
        "/" + "farm/x",
        "/" + "root/.cache",
        "/" + "home/alice/data",
    ]
    spared = [
        "swapped in turn",
        "a budget over the whole run",
        "equivalent at 1 BLEU",
        'pytest.fixture(scope="session")',
        "release the lock",
        "excellent",
        "/homework/",
    ]
    assert [text for text in caught if not OUTSIDE_WORDS.search(text)] == []
    assert [text for text in spared if OUTSIDE_WORDS.search(text)] == []


def test_tracked_files_speak_of_the_project_only():
    hits = []
    for name in project_files():
        path = REPO / name
        if not path.is_file():  # deleted in the working tree, not yet in the index
            continue
        data = path.read_bytes()
        if b"\0" in data:  # binary (images)
            continue
        text = data.decode("utf-8", errors="replace")
        hits += [f"{name}:{number}: {line}" for number, line in outside_words(text)]
    assert hits == [], "outside words (issue numbers, loans, sessions, one machine's paths):\n" + (
        "\n".join(hits)
    )
