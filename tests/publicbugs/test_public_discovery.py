"""list_files, glob and grep against public reports on peers' search tools."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from tests.file_support import call, tools


@pytest.fixture
def root(tmp_path: Path) -> Path:
    path = tmp_path / "w"
    path.mkdir()
    return path


NEWLINE_NAME = "nl\nname.txt"
ESCAPE_NAME = "ctl\x1b[31mred.txt"


@pytest.fixture
def odd_names(root: Path) -> Path:
    for name in (NEWLINE_NAME, ESCAPE_NAME, "sp ace.txt", "ünï.txt"):
        (root / name).write_text("needle\n")
    return root


def test_names_with_control_characters_are_quoted_in_listings(odd_names: Path) -> None:
    """https://github.com/opencoredev/sandbox-sdk/pull/9 (an agent sandbox's listing read
    a file name holding a newline as two entries): a newline in a name must not read as two
    entries, nor an escape sequence reach a terminal; such names are JSON-quoted as git
    quotes them, other names (spaces, non-ASCII) stay as they are."""
    t = tools(odd_names)
    expected_files = ['"ctl\\u001b[31mred.txt"', '"nl\\nname.txt"', "sp ace.txt", "ünï.txt"]
    listed = call(t["list_files"])
    assert listed.model_text().split("\n") == expected_files
    paths = [e.path for e in listed.details.entries]
    assert paths == [ESCAPE_NAME, NEWLINE_NAME, *expected_files[2:]]
    assert call(t["glob"], pattern="*.txt").model_text().split("\n") == expected_files
    grep = call(t["grep"], pattern="needle")
    assert grep.model_text().split("\n") == [f"{name}:1:needle" for name in expected_files]
    counted = call(t["grep"], pattern="needle", output_mode="count")
    assert counted.model_text().split("\n") == [f"{name}:1" for name in expected_files]
    with_context = call(t["grep"], pattern="needle", context=1, path=".")
    assert with_context.model_text().split("\n") == [
        '"ctl\\u001b[31mred.txt":1:needle',
        "--",
        '"nl\\nname.txt":1:needle',
        "--",
        "sp ace.txt:1:needle",
        "--",
        "ünï.txt:1:needle",
    ]


def test_a_quoted_name_decoded_as_json_reads_the_file(odd_names: Path) -> None:
    """https://github.com/opencoredev/sandbox-sdk/pull/9: what the listing shows is a path
    the model can pass back."""
    t = tools(odd_names)
    shown = call(t["glob"], pattern="nl*").model_text()
    assert shown == '"nl\\nname.txt"'
    read = call(t["read_file"], path=json.loads(shown))
    assert read.error is None, read.error
    assert read.model_text() == "     1\tneedle"


def test_glob_of_a_named_ignored_file_finds_it(root: Path) -> None:
    """https://github.com/anomalyco/opencode/issues/31994: a glob naming an existing
    git-ignored file said "No files matched", and the agent concluded it did not exist.
    Ignore rules never hide a named path; patterns with wildcards still honour them."""
    subprocess.run(["git", "init", "-q", str(root)], check=True)
    (root / ".gitignore").write_text("node_modules/\ndist\n")
    (root / "node_modules/effect").mkdir(parents=True)
    (root / "node_modules/effect/package.json").write_text("{}\n")
    (root / "dist").mkdir()
    (root / "dist/app.js").write_text("x\n")
    glob = tools(root)["glob"]
    named = call(glob, pattern="node_modules/effect/package.json")
    assert named.model_text() == "node_modules/effect/package.json"
    assert (named.details.matches, named.details.count) == (["node_modules/effect/package.json"], 1)
    under = call(glob, pattern="effect/package.json", path="node_modules")
    assert under.model_text() == "node_modules/effect/package.json"
    assert call(glob, pattern="./dist/app.js").model_text() == "dist/app.js"
    assert call(glob, pattern="**/node_modules/effect/package.json").model_text() == (
        "No files matched"
    )
    assert call(glob, pattern="dist/*.js").model_text() == "No files matched"
    assert call(glob, pattern="dist").model_text() == "No files matched"  # a directory
    assert call(glob, pattern=".git/HEAD").model_text() == "No files matched"
    climbing = call(glob, pattern="../outside.txt")  # refused, never looked up outside
    assert (climbing.error_code and climbing.error_code.value) == "INVALID_ARGUMENTS"
