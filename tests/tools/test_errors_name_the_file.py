"""Errors about a file name the file: a model that read or edited several files in one turn
must tell which one was refused without matching results to calls."""

from __future__ import annotations

import codecs
from pathlib import Path
from typing import Any

import pytest

from tests.file_support import call, tools
from workspace_tools import ErrorCode, invoke_tool_sync
from workspace_tools.adapters.anthropic_text_editor import text_editor_tool

BINARY = b"\x00\x01 not text\n"
TEXT_TOOLS = "the text tools neither show nor change binary files"


@pytest.mark.parametrize(
    ("tool", "arguments", "max_file_bytes", "message"),
    [
        (
            "read_file",
            {},
            None,
            f"sub/data.bin is binary (NUL bytes in its first 8 KiB); {TEXT_TOOLS}",
        ),
        (
            # Over max_file_bytes, read_file streams the file: the other refusal.
            "read_file",
            {},
            4,
            "sub/data.bin is binary (it contains NUL bytes); read_file shows text and images only",
        ),
        (
            "edit_file",
            {"old_text": "not", "new_text": "now"},
            None,
            f"sub/data.bin is binary (NUL bytes in its first 8 KiB); {TEXT_TOOLS}",
        ),
        (
            "write_file",
            {"content": "text\n"},
            None,
            f"sub/data.bin is binary (NUL bytes in its first 8 KiB); {TEXT_TOOLS}",
        ),
    ],
    ids=["read_file", "read_file_streamed", "edit_file", "write_file"],
)
def test_the_refused_binary_file_is_named(
    tmp_path: Path,
    tool: str,
    arguments: dict[str, Any],
    max_file_bytes: int | None,
    message: str,
) -> None:
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "data.bin").write_bytes(BINARY)
    options = {} if max_file_bytes is None else {"max_file_bytes": max_file_bytes}
    result = call(tools(tmp_path, **options)[tool], path="sub/data.bin", **arguments)
    assert (result.error_code, result.error) == (ErrorCode.BINARY_FILE, message)
    assert (tmp_path / "sub" / "data.bin").read_bytes() == BINARY


@pytest.mark.parametrize(
    "arguments",
    [{"command": "view"}, {"command": "str_replace", "old_str": "not", "new_str": "now"}],
    ids=["view", "str_replace"],
)
def test_the_text_editor_names_the_binary_file(tmp_path: Path, arguments: dict[str, Any]) -> None:
    (tmp_path / "data.bin").write_bytes(BINARY)
    result = invoke_tool_sync(
        text_editor_tool(tmp_path), {"path": "./data.bin", **arguments}, call_id="tu_1"
    )
    assert (result.error_code, result.error) == (
        ErrorCode.BINARY_FILE,
        f"data.bin is binary (NUL bytes in its first 8 KiB); {TEXT_TOOLS}",
    )
    assert (tmp_path / "data.bin").read_bytes() == BINARY


@pytest.mark.parametrize("tool", ["edit_file", "apply_patch"])
def test_a_character_the_files_encoding_cannot_hold_names_the_file(
    tmp_path: Path, tool: str
) -> None:
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "old.txt").write_bytes(b"caf\xe9\n")  # not UTF-8: latin-1
    if tool == "edit_file":
        arguments = {"path": "sub/old.txt", "old_text": "caf", "new_text": "\u20ac"}
    else:
        patch = (
            "*** Begin Patch\n*** Update File: sub/old.txt\n@@\n-caf\xe9\n+\u20ac\n*** End Patch\n"
        )
        arguments = {"patch": patch}
    result = call(tools(tmp_path)[tool], **arguments)
    assert result.error_code is ErrorCode.ENCODING_ERROR
    assert result.error is not None
    assert result.error.startswith(
        "sub/old.txt is latin-1, which cannot hold '\u20ac' (U+20AC, line 1); "
    ), result.error
    assert (tmp_path / "sub" / "old.txt").read_bytes() == b"caf\xe9\n"


def test_a_streamed_file_with_a_false_byte_order_mark_is_named(tmp_path: Path) -> None:
    # A UTF-16 BOM, then an odd number of bytes: not UTF-16, and over max_file_bytes, so
    # read_file streams it.
    (tmp_path / "odd.txt").write_bytes(b"\xff\xfea\x00b")
    result = call(tools(tmp_path, max_file_bytes=2)["read_file"], path="odd.txt")
    assert (result.error_code, result.error) == (
        ErrorCode.ENCODING_ERROR,
        "odd.txt starts with a utf-16-le byte order mark but is not valid utf-16-le",
    )


@pytest.mark.parametrize(
    ("data", "why"),
    [
        # A UTF-16 file cut after one byte of its last character.
        (
            "one\ntwo\n".encode("utf-16") + b"x",
            "its utf-16-le byte order mark is followed by bytes that are not utf-16-le, "
            "from offset 18: truncated data",
        ),
        (
            codecs.BOM_UTF32_BE + "one\n".encode("utf-32-be") + b"\x00\x11\x00\x00",
            "its utf-32-be byte order mark is followed by bytes that are not utf-32-be, "
            "from offset 20: code point not in range(0x110000)",
        ),
    ],
    ids=["utf-16-odd-length", "utf-32-out-of-range"],
)
@pytest.mark.parametrize("tool", ["read_file", "edit_file"])
def test_a_file_its_bom_does_not_explain_says_so(
    tmp_path: Path, data: bytes, why: str, tool: str
) -> None:
    # Its NULs make it binary once its BOM's encoding fails; the message says which part
    # of the file failed, not only that NULs were found.
    (tmp_path / "wide.txt").write_bytes(data)
    arguments = {"old_text": "one", "new_text": "two"} if tool == "edit_file" else {}
    result = call(tools(tmp_path)[tool], path="wide.txt", **arguments)
    assert (result.error_code, result.error) == (
        ErrorCode.BINARY_FILE,
        f"wide.txt is binary ({why}); {TEXT_TOOLS}",
    )
    assert (tmp_path / "wide.txt").read_bytes() == data
