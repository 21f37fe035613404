"""Replay edits on real text: files of the installed Python standard library are edited
region by region through edit_file and compared byte for byte with the same edits made on
the bytes directly; every diff must reproduce its step with ``git apply``."""

from __future__ import annotations

import random
import sysconfig
from pathlib import Path

import pytest

from tests.file_support import assert_diff_reproduces, call, tools

STDLIB = Path(sysconfig.get_paths()["stdlib"])
SOURCES = sorted(p for p in STDLIB.glob("*.py") if p.stat().st_size < 200_000)[::6][:30]
EDITS_PER_FILE = 4


def _plan(text: str, rng: random.Random) -> list[tuple[str, str]]:
    """Pick regions of 1-4 whole lines that occur once, and a change for each."""
    lines = text.splitlines(keepends=True)
    edits: list[tuple[str, str]] = []
    for _ in range(50):
        if len(edits) == EDITS_PER_FILE or len(lines) < 5:
            break
        start = rng.randrange(len(lines) - 4)
        old = "".join(lines[start : start + rng.randint(1, 4)])
        if not old.strip() or text.count(old) != 1:
            continue
        kind = rng.choice(["append", "insert", "delete", "rename"])
        if kind == "append":
            new = old.rstrip("\n") + "  # edited\n"
        elif kind == "insert":
            new = old + "    pass  # inserted\n"
        elif kind == "delete":
            new = ""
        else:
            new = old.replace("self", "this").replace("def ", "def x_")
        if new == old or any(old in prior or prior in old for prior, _ in edits):
            continue
        edits.append((old, new))
        text = text.replace(old, new)
        lines = text.splitlines(keepends=True)
    return edits


@pytest.mark.parametrize("newline", ["\n", "\r\n"], ids=["lf", "crlf"])
@pytest.mark.parametrize("source", SOURCES, ids=[p.name for p in SOURCES])
def test_stdlib_edits_replay_byte_for_byte(tmp_path: Path, source: Path, newline: str) -> None:
    root = tmp_path / "w"
    root.mkdir()
    text = source.read_bytes().decode("utf-8")
    expected = text.replace("\n", newline).encode()
    (root / source.name).write_bytes(expected)
    t = tools(root)
    assert call(t["read_file"], path=source.name).error is None
    edits = _plan(text, random.Random(source.name))
    assert edits
    for old, new in edits:
        before = expected
        result = call(t["edit_file"], path=source.name, old_text=old, new_text=new)
        assert result.error is None, result.error
        assert result.details.match == "exact"
        # The model sends LF; the file keeps its own line endings.
        styled_old, styled_new = (v.replace("\n", newline).encode() for v in (old, new))
        expected = expected.replace(styled_old, styled_new, 1)
        assert (root / source.name).read_bytes() == expected
        assert_diff_reproduces(tmp_path / "apply", source.name, before, expected, result.details)
