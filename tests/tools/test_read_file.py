from __future__ import annotations

import base64
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from tests.file_support import call, tools
from workspace_tools import ErrorCode, ToolContent

CUT = " [... line cut at 2000 characters]"
PNG = base64.b64decode(
    "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNk+M9QDwADhgGAWjR9awAAAABJRU5ErkJggg=="
)


@pytest.fixture
def root(tmp_path: Path) -> Path:
    path = tmp_path / "w"
    path.mkdir()
    return path


def _numbered(start: int, lines: list[str]) -> str:
    return "\n".join(f"{n:6}\t{line}" for n, line in enumerate(lines, start=start))


@pytest.mark.parametrize("whole", [True, False], ids=["whole", "streamed"])
@pytest.mark.parametrize(
    ("content", "offset", "limit", "shown", "total", "note"),
    [
        (b"a\nb\nc\n", 1, 2000, ["a", "b", "c"], 3, None),
        (b"a\r\nb\r\nc", 1, 2000, ["a", "b", "c"], 3, None),
        (b"a\nb\nc\nd\n", 2, 2, ["b", "c"], 4, "[Lines 2-3 of 4 shown. Use offset=4 to read on.]"),
        (b"a\nb\n", 2, 1, ["b"], 2, None),
        (b"\n\n", 1, 1, [""], 2, "[Lines 1-1 of 2 shown. Use offset=2 to read on.]"),
        (b"caf\xe9\n", 1, 10, ["caf\xe9"], 1, None),
    ],
    ids=["all", "crlf_no_final_newline", "window", "last_line", "blank_lines", "latin1"],
)
def test_read_window(
    root: Path,
    whole: bool,
    content: bytes,
    offset: int,
    limit: int,
    shown: list[str],
    total: int,
    note: str | None,
) -> None:
    (root / "f").write_bytes(content)
    # max_file_bytes=1 makes every file take the streaming path.
    options = {} if whole else {"max_file_bytes": 1}
    result = call(tools(root, **options)["read_file"], path="f", offset=offset, limit=limit)
    expected = _numbered(offset, shown) + ("" if note is None else "\n\n" + note)
    assert result.content == expected
    details = result.details
    assert (details.start_line, details.end_line, details.total_lines) == (
        offset,
        offset + len(shown) - 1,
        total,
    )
    assert details.truncated is (note is not None)
    assert details.size_bytes == len(content)


@pytest.mark.parametrize("whole", [True, False], ids=["whole", "streamed"])
def test_long_lines_are_cut_with_marker(root: Path, whole: bool) -> None:
    (root / "f").write_bytes(b"x" * 5000 + b"\n" + "é".encode() * 3000 + b"\nshort\n")
    options = {"max_line_length": 2000} | ({} if whole else {"max_file_bytes": 1})
    result = call(tools(root, **options)["read_file"], path="f")
    marker = " [... line cut at 2000 characters]"
    note = (
        '\n\n[A line marked "line cut" goes on past its first 2,000 characters. To see the '
        "rest, grep for text in it: grep shows the part of a line around each match, "
        "wherever it lies.]"
    )
    lines = _numbered(1, ["x" * 2000 + marker, "é" * 2000 + marker, "short"])
    assert result.content == lines + note


@pytest.mark.parametrize(
    ("content", "encoding", "newline"),
    [
        (b"a\r\nb\r\n", "utf-8", "crlf"),
        (b"a\nb\r\nc\n", "utf-8", "lf"),
        (b"\xef\xbb\xbfa\n", "utf-8-bom", "lf"),
        ("a\r\n".encode("utf-16-be"), "utf-8", "crlf"),
        ("a\n".encode("utf-32"), "utf-32-le", "lf"),
        (b"no newline", "utf-8", None),
    ],
    ids=["crlf", "mostly_lf", "utf8_bom", "utf16be_no_bom_is_binary", "utf32", "none"],
)
def test_reports_encoding_and_newline(
    root: Path, content: bytes, encoding: str, newline: str | None
) -> None:
    (root / "f").write_bytes(content)
    result = call(tools(root)["read_file"], path="f")
    if b"\x00" in content and not content.startswith((b"\xff\xfe", b"\xfe\xff")):
        assert result.error_code is ErrorCode.BINARY_FILE
        return
    assert (result.details.encoding, result.details.newline) == (encoding, newline)


def test_image_comes_back_as_image_content(root: Path) -> None:
    (root / "dot.png").write_bytes(PNG)
    result = call(tools(root)["read_file"], path="dot.png")
    assert isinstance(result.content, ToolContent)
    image = result.content.parts[1]
    assert (image.media_type, image.to_bytes()) == ("image/png", PNG)
    assert result.details.media_type == "image/png"


@pytest.mark.parametrize(
    ("setup", "path", "code"),
    [
        ("binary", "f.bin", ErrorCode.BINARY_FILE),
        ("none", "missing.txt", ErrorCode.NOT_FOUND),
        ("dir", "d", ErrorCode.IS_A_DIRECTORY),
        ("none", ".", ErrorCode.IS_A_DIRECTORY),
        ("etc_link", "l/passwd", ErrorCode.OUTSIDE_WORKSPACE),
        ("none", "/etc/passwd", ErrorCode.OUTSIDE_WORKSPACE),
        ("loop", "loop/x", ErrorCode.NOT_FOUND),
        ("fifo", "fifo", ErrorCode.TOOL_ERROR),
    ],
)
def test_read_refusals(root: Path, setup: str, path: str, code: ErrorCode) -> None:
    if setup == "binary":
        (root / "f.bin").write_bytes(b"ELF\x00\x01\x02")
    elif setup == "dir":
        (root / "d").mkdir()
    elif setup == "etc_link":
        (root / "l").symlink_to("/etc")
    elif setup == "loop":
        (root / "loop").symlink_to("loop")
    elif setup == "fifo":
        os.mkfifo(root / "fifo")
    assert call(tools(root)["read_file"], path=path).error_code is code


def test_offset_past_end_is_refused(root: Path) -> None:
    (root / "f").write_bytes(b"a\nb\n")
    result = call(tools(root)["read_file"], path="f", offset=5)
    assert result.error_code is ErrorCode.INVALID_ARGUMENTS
    assert "2 lines" in result.error


def test_empty_file(root: Path) -> None:
    (root / "f").write_bytes(b"")
    result = call(tools(root)["read_file"], path="f")
    assert result.content == "[f is empty]"
    assert result.details.total_lines == 0


def test_schema_shows_the_workspace_default(root: Path) -> None:
    schema = tools(root, read_limit=50)["read_file"].input_schema()
    assert schema["properties"]["limit"]["default"] == 50
    assert tools(root)["read_file"].input_schema()["properties"]["limit"]["default"] == 2000


_STREAM_READ = textwrap.dedent(
    """
    import resource, sys
    from workspace_tools import workspace_tools, invoke_tool_sync

    read = {t.name: t for t in workspace_tools(sys.argv[1])}["read_file"]
    result = invoke_tool_sync(read, {"path": sys.argv[2], "offset": 500000, "limit": 101})
    assert result.error is None, result.error
    print(result.details.model_dump_json())
    print(result.content.splitlines()[0])
    # VmHWM is this process's own peak; ru_maxrss keeps the forking parent's peak across exec.
    try:
        with open("/proc/self/status") as status:
            hwm = next(line for line in status if line.startswith("VmHWM:"))
        print(int(hwm.split()[1]))
    except FileNotFoundError:
        print(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss // 1024)  # macOS: bytes
    """
)

_GIB = 1 << 30


@pytest.mark.slow
def test_one_gib_file_is_streamed(root: Path) -> None:
    line = b"%09d " + b"x" * 90 + b"\n"
    block_lines = 1 << 14
    block = b"".join(line % n for n in range(block_lines))
    with open(root / "big.txt", "wb") as handle:
        for start in range(0, _GIB // len(block)):
            if start * block_lines <= 500_100 < (start + 1) * block_lines + block_lines:
                handle.write(b"".join(line % (start * block_lines + n) for n in range(block_lines)))
            else:
                handle.write(block)
    size = (root / "big.txt").stat().st_size
    assert size >= _GIB * 0.99
    repo = Path(__file__).resolve().parents[2]
    try:
        out = subprocess.run(
            [sys.executable, "-c", _STREAM_READ, str(root), "big.txt"],
            capture_output=True,
            check=True,
            cwd=repo,
            env={**os.environ, "PYTHONPATH": str(repo)},
        ).stdout.decode()
    finally:
        (root / "big.txt").unlink()  # pytest keeps recent tmp dirs; do not keep 1 GiB
    details_json, first, max_rss_kib = out.splitlines()
    assert first == "500000\t000499999 " + "x" * 90
    assert f'"total_lines":{size // len(line % 0)}' in details_json
    assert '"start_line":500000,"end_line":500100' in details_json
    assert '"truncated":true' in details_json
    assert int(max_rss_kib) * 1024 < 200 * (1 << 20)  # the file is 1 GiB


def test_image_over_the_limit_is_refused(root: Path) -> None:
    (root / "dot.png").write_bytes(PNG)
    result = call(tools(root, max_image_bytes=10)["read_file"], path="dot.png")
    assert result.error_code is ErrorCode.FILE_TOO_LARGE


@pytest.mark.parametrize(
    ("content", "shown", "total"),
    [
        (b"a\n" + b"y" * (3 << 20) + b"\nb\n", ["a", "y" * 2000 + CUT, "b"], 3),
        (
            "h\r\n".encode("utf-16") + "é\r\n".encode("utf-16-le") * (1 << 19),
            ["h", "é"],
            1 + (1 << 19),
        ),
    ],
    ids=["line_over_several_chunks", "utf16_over_several_chunks"],
)
def test_streamed_reads_across_chunks(
    root: Path, content: bytes, shown: list[str], total: int
) -> None:
    (root / "f").write_bytes(content)
    t = tools(root, max_file_bytes=1)
    result = call(t["read_file"], path="f", limit=3 if len(shown) == 3 else 2)
    assert result.content.split("\n\n[")[0] == _numbered(1, shown)
    assert result.details.total_lines == total


@pytest.mark.parametrize("whole", [True, False], ids=["whole", "streamed"])
def test_long_read_stops_at_a_whole_line_and_says_where_to_go_on(root: Path, whole: bool) -> None:
    # 3,000 lines of 100 characters: the default limit of 2,000 lines would be ~216,000
    # characters, cut mid-line by the result limit with no word of where to continue.
    lines = [f"{n:05} " + "x" * 94 for n in range(3000)]
    (root / "big.txt").write_text("\n".join(lines) + "\n")
    options = {} if whole else {"max_file_bytes": 1}
    result = call(tools(root, **options)["read_file"], path="big.txt")
    shown = 40_000 // len(_numbered(1, [lines[0]]) + "\n")  # whole numbered lines that fit
    note = f"[Lines 1-{shown} of 3000 shown. Use offset={shown + 1} to read on.]"
    assert result.content == _numbered(1, lines[:shown]) + "\n\n" + note
    assert (result.details.end_line, result.details.truncated) == (shown, True)
    assert result.model_text() == result.content  # nothing cut by the result limit
    following = call(tools(root, **options)["read_file"], path="big.txt", offset=shown + 1)
    assert following.content.startswith(_numbered(shown + 1, [lines[shown]]) + "\n")
