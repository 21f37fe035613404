"""Text files as bytes: encoding by BOM, strict UTF-8 or lossless latin-1; newlines; binary.

The rules (SPEC "Text files"):

- A byte order mark decides the encoding: UTF-8, UTF-16 LE/BE, UTF-32 LE/BE (Unicode 15,
  section 23.8). UTF-32 LE is tested before UTF-16 LE because its BOM starts with the same
  two bytes.
- Without a BOM, bytes that decode as strict UTF-8 are UTF-8; anything else is decoded as
  latin-1, which maps each byte to one code point and back, so bytes outside an edit are never
  changed and U+FFFD never reaches a file.
- A file is binary when its first 8 KiB hold a NUL byte, unless a BOM says UTF-16 or UTF-32
  (git's and ripgrep's heuristic).
- The newline style is the file's dominant line ending, LF or CRLF.
"""

from __future__ import annotations

import codecs
from dataclasses import dataclass
from typing import AnyStr, Literal

from workspace_tools._errors import ErrorCode, ToolError, clipped

BINARY_SNIFF_BYTES = 8192
"""How many leading bytes are checked for NUL to call a file binary."""

NewlineName = Literal["lf", "crlf", "cr"]

# (BOM, codec for the bytes after it, label). Order matters: UTF-32 LE before UTF-16 LE.
_BOMS: tuple[tuple[bytes, str, str], ...] = (
    (codecs.BOM_UTF8, "utf-8", "utf-8-bom"),
    (codecs.BOM_UTF32_LE, "utf-32-le", "utf-32-le"),
    (codecs.BOM_UTF32_BE, "utf-32-be", "utf-32-be"),
    (codecs.BOM_UTF16_LE, "utf-16-le", "utf-16-le"),
    (codecs.BOM_UTF16_BE, "utf-16-be", "utf-16-be"),
)

_NEWLINES: dict[str, NewlineName] = {"\n": "lf", "\r\n": "crlf", "\r": "cr"}


@dataclass(frozen=True)
class TextFormat:
    """How a text file's characters become bytes.

    Attributes:
        codec: Python codec name for the bytes after the BOM (``utf-8``, ``utf-16-le``,
            ``latin-1``, ...).
        bom: the byte order mark written before the text (``b""`` for none).
        label: the name results show: ``utf-8``, ``utf-8-bom``, ``utf-16-le``, ``utf-16-be``,
            ``utf-32-le``, ``utf-32-be`` or ``latin-1``.
    """

    codec: str = "utf-8"
    bom: bytes = b""
    label: str = "utf-8"

    @property
    def byte_newlines(self) -> bool:
        """Whether LF is the single byte 0x0A that no other character contains (UTF-8, latin-1)."""
        return self.codec in ("utf-8", "latin-1")


UTF8 = TextFormat()
LATIN1 = TextFormat(codec="latin-1", label="latin-1")


@dataclass(frozen=True)
class DecodedText:
    """A text file's characters and the format to write them back in.

    ``text`` keeps the file's own line endings; it never contains the BOM.
    """

    text: str
    format: TextFormat


def bom_format(head: bytes) -> TextFormat | None:
    """The format a BOM at the start of ``head`` announces, or ``None`` without a BOM."""
    for bom, codec, label in _BOMS:
        if head.startswith(bom):
            return TextFormat(codec=codec, bom=bom, label=label)
    return None


def looks_binary(head: bytes) -> bool:
    """Whether ``head`` (a file's first bytes) marks a binary file: a NUL in the first 8 KiB,
    unless a UTF-16 or UTF-32 BOM explains the NULs."""
    fmt = bom_format(head)
    if fmt is not None and fmt.codec != "utf-8":
        return False
    return b"\x00" in head[:BINARY_SNIFF_BYTES]


def sniff_format(head: bytes) -> TextFormat | None:
    """The format of a file from its first bytes: a BOM's, else UTF-8; ``None`` when binary.

    The UTF-8 guess is provisional: :func:`decode_text` falls back to latin-1 when the whole
    content is not strict UTF-8.
    """
    if looks_binary(head):
        return None
    return bom_format(head) or UTF8


def detect_format(data: bytes) -> TextFormat:
    """The format :func:`decode_text` reads ``data`` in, whatever its NUL bytes: a BOM's when
    the bytes after it decode in that codec, else UTF-8 when strict UTF-8, else latin-1.
    For showing bytes that git calls text (a NUL after git's 8,000 bytes) as text."""
    fmt = bom_format(data)
    if fmt is not None:
        try:
            data[len(fmt.bom) :].decode(fmt.codec)
            return fmt
        except UnicodeDecodeError:
            pass  # as decode_text: judged as if the BOM were absent
    try:
        data.decode("utf-8")
    except UnicodeDecodeError:
        return LATIN1
    return UTF8


def decode_text(data: bytes, name: str | None = None) -> DecodedText:
    """Decode a whole file by the rules in this module's docstring; ``name``, the file's
    path as the model wrote it, is what an error names (a model reading several files must
    tell which one failed).

    Raises:
        ToolError: ``BINARY_FILE`` when the content is binary.
    """
    fmt = bom_format(data)
    why = "NUL bytes in its first 8 KiB"
    if fmt is not None:
        try:
            return DecodedText(data[len(fmt.bom) :].decode(fmt.codec), fmt)
        except UnicodeDecodeError as exc:
            # A BOM followed by invalid data: judge the bytes as if it were absent, and
            # say why the BOM's encoding was not taken (a truncated UTF-16 file holds NULs).
            why = (
                f"its {fmt.label} byte order mark is followed by bytes that are not "
                f"{fmt.label}, from offset {len(fmt.bom) + exc.start:,}: {exc.reason}"
            )
    if b"\x00" in data[:BINARY_SNIFF_BYTES]:
        raise ToolError(
            f"{clipped(name) if name else 'The file'} is binary ({why}); "
            "the text tools neither show nor change binary files",
            ErrorCode.BINARY_FILE,
        )
    try:
        return DecodedText(data.decode("utf-8"), UTF8)
    except UnicodeDecodeError:
        return DecodedText(data.decode("latin-1"), LATIN1)


def encode_text(text: str, fmt: TextFormat, name: str) -> bytes:
    """``text`` as bytes in ``fmt`` with its BOM, for the file ``name`` (the path an error
    names).

    Raises:
        ToolError: ``ENCODING_ERROR`` naming the first character the encoding cannot hold.
    """
    try:
        return fmt.bom + text.encode(fmt.codec)
    except UnicodeEncodeError as exc:
        bad = exc.object[exc.start : exc.end]
        line = text.count("\n", 0, exc.start) + 1
        raise ToolError(
            f"{clipped(name)} is {fmt.label}, which cannot hold {bad!r} (U+{ord(bad[0]):04X}, "
            f"line {line}); use only characters that encoding has, or an escape the file's "
            "language understands",
            ErrorCode.ENCODING_ERROR,
        ) from exc


def dominant_newline(text: AnyStr) -> str | None:
    """The line ending most lines of ``text`` use, ``"\\n"`` or ``"\\r\\n"`` (LF on a tie);
    ``"\\r"`` when it has CRs and no LF (classic Mac OS files: an edit keeps them so, as
    git keeps such a file one line); ``None`` when it has neither. ``text`` may be the bytes
    of a text whose CR and LF are single bytes (ASCII, UTF-8, latin-1)."""
    lf = lf_of(text)
    cr = cr_of(text)
    if cr not in text:  # one scan instead of two counts, for most files
        return "\n" if lf in text else None
    lf_total = text.count(lf)
    if lf_total == 0:
        return "\r"
    crlf = text.count(cr + lf)
    return "\r\n" if crlf > lf_total - crlf else "\n"


def lf_of(text: AnyStr) -> AnyStr:
    """A line feed of ``text``'s kind: ``"\\n"`` for a text, ``b"\\n"`` for bytes."""
    return "\n" if isinstance(text, str) else b"\n"


def cr_of(text: AnyStr) -> AnyStr:
    """A carriage return of ``text``'s kind: ``"\\r"`` for a text, ``b"\\r"`` for bytes."""
    return "\r" if isinstance(text, str) else b"\r"


def newline_name(newline: str | None) -> NewlineName | None:
    """``"lf"``, ``"crlf"`` or ``"cr"`` for a newline string; ``None`` for ``None``."""
    return None if newline is None else _NEWLINES[newline]


def convert_newlines(text: str, newline: str) -> str:
    """``text`` with every CRLF and LF turned into ``newline``; lone CRs are left alone (with
    ``newline`` ``"\\r"``, every break is then a CR)."""
    unified = text.replace("\r\n", "\n")
    return unified if newline == "\n" else unified.replace("\n", newline)


def count_lines(text: str) -> int:
    """Lines in ``text`` as an editor numbers them: LFs, plus one for a last unterminated line."""
    if not text:
        return 0
    return text.count("\n") + (0 if text.endswith("\n") else 1)


_IMAGE_MAGIC: tuple[tuple[bytes, str], ...] = (
    (b"\x89PNG\r\n\x1a\n", "image/png"),
    (b"\xff\xd8\xff", "image/jpeg"),
    (b"GIF87a", "image/gif"),
    (b"GIF89a", "image/gif"),
)


def image_media_type(head: bytes) -> str | None:
    """The media type of a PNG, JPEG, GIF or WebP by its magic bytes, else ``None``."""
    for magic, media_type in _IMAGE_MAGIC:
        if head.startswith(magic):
            return media_type
    if head[:4] == b"RIFF" and head[8:12] == b"WEBP":
        return "image/webp"
    return None
