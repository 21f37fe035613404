"""Hostile names and ignore files from the repository: names that could pass for other
lines of a listing, and .gitignore patterns that make a backtracking engine take years."""

from __future__ import annotations

import json
import os
import threading
from pathlib import Path
from typing import Any

import pytest

from tests.file_support import call, tools

NAMES = {
    "a\nb.txt": '"a\\nb.txt"',
    "\x1b[31mred.txt": '"\\u001b[31mred.txt"',
    "x\rEVIL": '"x\\rEVIL"',
    "\u202egnp.exe": '"\\u202egnp.exe"',
    'q"uote': '"q\\"uote"',
    "caf\u00e9.txt": "caf\u00e9.txt",
    "plain.txt": "plain.txt",
}


@pytest.fixture
def root(tmp_path: Path) -> Path:
    path = tmp_path / "w"
    path.mkdir()
    for name in NAMES:
        (path / name).write_bytes(b"hit\n")
    (path / os.fsdecode(b"raw\xff")).write_bytes(b"hit\n")
    return path


def _expected_lines(suffix: str = "") -> list[str]:
    shown = {**NAMES, os.fsdecode(b"raw\xff"): '"raw\\udcff"'}
    return [shown[name] + suffix for name in sorted(shown)]


def test_list_files_quotes_names_that_could_pass_for_other_lines(root: Path) -> None:
    result = call(tools(root)["list_files"])
    assert result.model_text().split("\n") == _expected_lines()
    # Details keep the names as they are, for the application.
    assert sorted(e.path for e in result.details.entries) == sorted(
        [*NAMES, os.fsdecode(b"raw\xff")]
    )


def test_a_quoted_name_is_a_json_string_of_the_name() -> None:
    # A model copies the line into its JSON arguments: the quoted form must decode to the
    # name itself (a name not UTF-8 to its surrogate-escaped str, as os.fsdecode gives).
    for name, shown in {**NAMES, os.fsdecode(b"raw\xff"): '"raw\\udcff"'}.items():
        if shown.startswith('"'):
            assert json.loads(shown) == name, (name, shown)


def test_glob_quotes_names(root: Path) -> None:
    result = call(tools(root)["glob"], pattern="*")
    assert result.model_text().split("\n") == _expected_lines()


@pytest.mark.parametrize(
    "mode, suffix", [("content", ":1:hit"), ("files_with_matches", ""), ("count", ":1")]
)
def test_grep_quotes_names_in_every_mode(root: Path, mode: str, suffix: str) -> None:
    result = call(tools(root)["grep"], pattern="hit", output_mode=mode)
    assert result.model_text().split("\n") == _expected_lines(suffix)


def test_grep_with_context_quotes_names(root: Path) -> None:
    (root / "a\nb.txt").write_bytes(b"before\nhit\n")
    result = call(tools(root)["grep"], pattern="hit", path="a\nb.txt", context=1)
    assert result.model_text() == '"a\\nb.txt"-1-before\n"a\\nb.txt":2:hit'


# --- ignore files ----------------------------------------------------------------------

CATASTROPHIC = [
    "**/" * 200 + "x",  # 200 optional directory groups over a deep path
    "*a" * 40 + "*b",  # 40 stars over a long name of a's
    "a/" + "**/" * 30 + "z",
]


def _finishes(work: Any, margin: float = 120) -> Any:
    """Run ``work`` in a thread and wait for it with a wide margin (a backtracking
    engine takes years, not minutes)."""
    outcome: list[Any] = []
    thread = threading.Thread(target=lambda: outcome.append(work()), daemon=True)
    thread.start()
    thread.join(margin)
    assert outcome, f"still running after {margin} s"
    return outcome[0]


def test_catastrophic_gitignore_patterns_are_matched_in_linear_time(tmp_path: Path) -> None:
    root = tmp_path / "w"
    deep = root / "a" / "/".join("b" * 25)
    deep.mkdir(parents=True)
    (deep / "y").write_bytes(b"hit\n")
    (root / ("a" * 250)).write_bytes(b"hit\n")
    (root / ("a" * 250 + "b")).write_bytes(b"hit\n")
    (deep / "x").write_bytes(b"hit\n")
    (root / ".gitignore").write_text("\n".join(CATASTROPHIC) + "\n")
    result = _finishes(
        lambda: call(tools(root)["grep"], pattern="hit", output_mode="files_with_matches")
    )
    # By the rules: x at any depth is ignored, as is a name of 40 a's or more then b; no
    # z exists. (git itself is no oracle here: its matcher backtracks for hours on these.)
    assert result.model_text().split("\n") == ["a/" + "/".join("b" * 25) + "/y", "a" * 250]
    assert result.details.ignored == 2


@pytest.mark.parametrize("tool_name", ["read_file", "write_file", "edit_file", "grep"])
@pytest.mark.parametrize("path", ["f.txt/", "f.txt/."])
def test_a_trailing_slash_never_names_a_file(tmp_path: Path, tool_name: str, path: str) -> None:
    (tmp_path / "f.txt").write_bytes(b"old\n")
    arguments = {
        "read_file": {},
        "write_file": {"content": "new\n"},
        "edit_file": {"old_text": "old", "new_text": "new"},
        "grep": {"pattern": "old"},
    }[tool_name]
    result = call(tools(tmp_path)[tool_name], path=path, **arguments)
    assert (result.error_code and result.error_code.value, result.error) == (
        "NOT_A_DIRECTORY",
        f"Path {path!r} ends with a slash, but f.txt is not a directory",
    )
    assert (tmp_path / "f.txt").read_bytes() == b"old\n"


def _create_at(tmp_path: Path, way: str, path: str) -> Any:
    if way == "write_file":
        return call(tools(tmp_path)["write_file"], path=path, content="x\n")
    if way == "apply_patch add":
        patch = f"*** Begin Patch\n*** Add File: {path}\n+x\n*** End Patch"
        return call(tools(tmp_path)["apply_patch"], patch=patch)
    if way == "apply_patch move":
        patch = f"*** Begin Patch\n*** Update File: f.txt\n*** Move to: {path}\n*** End Patch"
        return call(tools(tmp_path)["apply_patch"], patch=patch)
    from workspace_tools.adapters.anthropic_text_editor import text_editor_tool

    return call(text_editor_tool(tmp_path), command="create", path=path, file_text="x\n")


@pytest.mark.parametrize("way", ["write_file", "apply_patch add", "apply_patch move", "create"])
@pytest.mark.parametrize("path", ["new/", "new/.", "sub/new/"])
def test_a_path_written_as_a_directory_never_becomes_a_file(
    tmp_path: Path, way: str, path: str
) -> None:
    # open("new/", O_CREAT) fails with EISDIR; a tool must not write "new" instead.
    (tmp_path / "sub").mkdir()
    (tmp_path / "f.txt").write_bytes(b"old\n")
    before = sorted(p.name for p in tmp_path.rglob("*"))
    result = _create_at(tmp_path, way, path)
    shown = path.removesuffix(".")
    refusal = (
        f"Error: The path {path} names a directory; create needs the path of a file."
        if way == "create"  # in the editor's own words
        else f"{shown!r} names a directory; give the path of a file"
    )
    assert (result.error_code and result.error_code.value, result.error) == (
        "INVALID_ARGUMENTS",
        refusal,
    ), result.model_text()
    assert sorted(p.name for p in tmp_path.rglob("*")) == before
