from __future__ import annotations

import codecs
import tempfile
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.file_support import call, tools
from workspace_tools import ErrorCode, ToolError
from workspace_tools.text._decode import (
    TextFormat,
    decode_text,
    dominant_newline,
    encode_text,
    looks_binary,
)

# (label, codec, BOM) of every encoding a file may have.
FORMATS = [
    ("utf-8", "utf-8", b""),
    ("utf-8-bom", "utf-8", codecs.BOM_UTF8),
    ("utf-16-le", "utf-16-le", codecs.BOM_UTF16_LE),
    ("utf-16-be", "utf-16-be", codecs.BOM_UTF16_BE),
    ("utf-32-le", "utf-32-le", codecs.BOM_UTF32_LE),
    ("utf-32-be", "utf-32-be", codecs.BOM_UTF32_BE),
    ("latin-1", "latin-1", b""),
]

ANY_CHAR = st.characters(blacklist_characters="\x00\ufeff\r\n", blacklist_categories=("Cs",))
LATIN1_CHAR = st.characters(min_codepoint=1, max_codepoint=255, blacklist_characters="\r\n")
MARKER = "@@MARK@@"


def _body(lines: list[str], newline: str, label: str) -> str:
    # 0xFF never occurs in UTF-8, so a latin-1 file always holds one.
    text = newline.join(lines) + newline + MARKER + newline
    return text + "ÿ" if label == "latin-1" else text


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    fmt=st.sampled_from(FORMATS),
    newline=st.sampled_from(["\n", "\r\n"]),
    data=st.data(),
)
def test_encoding_round_trips_through_an_edit(
    fmt: tuple[str, str, bytes], newline: str, data: st.DataObject
) -> None:
    label, codec, bom = fmt
    alphabet = LATIN1_CHAR if label == "latin-1" else ANY_CHAR
    lines = data.draw(st.lists(st.text(alphabet, max_size=8).filter(lambda s: MARKER not in s)))
    text = _body(lines, newline, label)
    raw = bom + text.encode(codec)

    decoded = decode_text(raw)
    assert decoded.text == text
    assert decoded.format.label == label
    assert encode_text(decoded.text, decoded.format, "f") == raw

    with tempfile.TemporaryDirectory() as temp:
        root = Path(temp)
        (root / "f").write_bytes(raw)
        result = call(tools(root)["edit_file"], path="f", old_text=MARKER, new_text="é\nx")
        assert result.error is None, result.error
        expected = bom + text.replace(MARKER, "é" + newline + "x").encode(codec)
        assert (root / "f").read_bytes() == expected


@pytest.mark.parametrize(
    ("head", "binary"),
    [
        (b"plain text", False),
        (b"a\x00b", True),
        (b"x" * 8192 + b"\x00", False),
        (codecs.BOM_UTF16_LE + "ab".encode("utf-16-le"), False),
        (codecs.BOM_UTF32_BE + "ab".encode("utf-32-be"), False),
        (codecs.BOM_UTF8 + b"a\x00", True),
    ],
    ids=["text", "nul", "nul_after_8k", "utf16_bom", "utf32_bom", "utf8_bom_with_nul"],
)
def test_binary_detection(head: bytes, binary: bool) -> None:
    assert looks_binary(head) is binary


def test_bom_with_invalid_data_is_judged_without_it() -> None:
    raw = codecs.BOM_UTF16_LE + b"abc"  # odd length: not UTF-16
    decoded = decode_text(raw)
    assert (decoded.text, decoded.format.label) == ("ÿþabc", "latin-1")


@pytest.mark.parametrize(
    ("text", "newline"),
    [
        ("a\nb\n", "\n"),
        ("a\r\nb\r\n", "\r\n"),
        ("a\r\nb\nc\n", "\n"),
        ("a", None),
        ("a\r", "\r"),
        ("a\rb\r", "\r"),
    ],
)
def test_dominant_newline(text: str, newline: str | None) -> None:
    assert dominant_newline(text) == newline


def test_encode_names_the_character_it_cannot_hold() -> None:
    with pytest.raises(ToolError) as caught:
        encode_text("ok\nno €", TextFormat(codec="latin-1", label="latin-1"), "a.txt")
    assert caught.value.code is ErrorCode.ENCODING_ERROR
    assert caught.value.message.startswith(
        "a.txt is latin-1, which cannot hold '€' (U+20AC, line 2)"
    )
