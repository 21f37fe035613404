from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from tests.file_support import assert_diff_reproduces, call, tools
from workspace_tools import ErrorCode


@pytest.fixture
def root(tmp_path: Path) -> Path:
    path = tmp_path / "w"
    path.mkdir()
    return path


def test_new_file_is_lf_utf8_with_parents(root: Path, tmp_path: Path) -> None:
    result = call(tools(root)["write_file"], path="a/b/c.txt", content="x\r\ny\n")
    assert result.content == {"path": "a/b/c.txt", "created": True, "lines": 2, "bytes": 4}
    assert (root / "a/b/c.txt").read_bytes() == b"x\ny\n"
    assert result.details.created is True
    assert result.details.diff.startswith("diff --git a/a/b/c.txt b/a/b/c.txt\nnew file mode")
    assert "--- /dev/null\n+++ b/a/b/c.txt\n" in result.details.diff
    assert_diff_reproduces(tmp_path / "apply", "a/b/c.txt", None, b"x\ny\n", result.details)


def test_lf_file_stays_lf_when_the_system_separator_is_crlf(
    root: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(os, "linesep", "\r\n")
    (root / "f").write_bytes(b"a\nb\n")
    result = call(tools(root)["write_file"], path="f", content="a\nb\nc\n")
    assert result.error is None
    assert (root / "f").read_bytes() == b"a\nb\nc\n"
    call(tools(root)["write_file"], path="g", content="1\n2\n")
    assert (root / "g").read_bytes() == b"1\n2\n"


@pytest.mark.parametrize(
    ("editorconfig", "path", "expected"),
    [
        (b"root = true\n[*]\nend_of_line = crlf\n", "n.txt", b"a\r\nb\r\n"),
        (b"[*.bat]\nend_of_line = crlf\n", "n.txt", b"a\nb\n"),
        (b"[*.{bat,cmd}]\nend_of_line = crlf\n", "d/n.cmd", b"a\r\nb\r\n"),
        (b"[*]\nend_of_line = crlf\n[Makefile]\nend_of_line = lf\n", "Makefile", b"a\nb\n"),
    ],
    ids=["star", "other_extension", "braces_in_subdir", "later_section_wins"],
)
def test_new_file_newline_follows_editorconfig(
    root: Path, editorconfig: bytes, path: str, expected: bytes
) -> None:
    (root / ".editorconfig").write_bytes(editorconfig)
    assert call(tools(root)["write_file"], path=path, content="a\nb\n").error is None
    assert (root / path).read_bytes() == expected


def test_editorconfig_outside_the_root_is_ignored(tmp_path: Path, root: Path) -> None:
    (tmp_path / ".editorconfig").write_bytes(b"[*]\nend_of_line = crlf\n")
    assert call(tools(root)["write_file"], path="n.txt", content="a\n").error is None
    assert (root / "n.txt").read_bytes() == b"a\n"


@pytest.mark.parametrize(
    ("old", "content", "expected"),
    [
        (b"a\r\nb\r\n", "x\ny\n", b"x\r\ny\r\n"),
        ("é\n".encode("utf-16"), "ü\nv\n", "ü\nv\n".encode("utf-16")),
        (b"\xef\xbb\xbfold\n", "new\n", b"\xef\xbb\xbfnew\n"),
        (b"caf\xe9\n", "th\xe9\n", b"th\xe9\n"),
    ],
    ids=["crlf", "utf16", "utf8_bom", "latin1"],
)
def test_overwrite_keeps_encoding_and_newlines(
    root: Path, old: bytes, content: str, expected: bytes
) -> None:
    (root / "f").write_bytes(old)
    result = call(tools(root)["write_file"], path="f", content=content)
    assert result.error is None
    assert result.content["created"] is False
    assert (root / "f").read_bytes() == expected


def test_overwrite_keeps_mode(root: Path) -> None:
    (root / "f").write_bytes(b"a\n")
    (root / "f").chmod(0o700)
    assert call(tools(root)["write_file"], path="f", content="b\n").error is None
    assert (root / "f").stat().st_mode & 0o7777 == 0o700


@pytest.mark.parametrize(
    ("content", "code"),
    [("euro €\n", ErrorCode.ENCODING_ERROR), ("lone \ud800\n", ErrorCode.ENCODING_ERROR)],
    ids=["not_in_latin1", "lone_surrogate"],
)
def test_unencodable_text_is_refused(root: Path, content: str, code: ErrorCode) -> None:
    (root / "f").write_bytes(b"caf\xe9\n")
    result = call(tools(root)["write_file"], path="f", content=content)
    assert result.error_code is code
    assert (root / "f").read_bytes() == b"caf\xe9\n"


def test_binary_file_is_not_overwritten(root: Path) -> None:
    (root / "f.bin").write_bytes(b"\x00\x01\x02")
    result = call(tools(root)["write_file"], path="f.bin", content="text")
    assert result.error_code is ErrorCode.BINARY_FILE
    assert (root / "f.bin").read_bytes() == b"\x00\x01\x02"


def test_stale_file_is_not_overwritten(root: Path) -> None:
    (root / "f").write_bytes(b"a\n")
    t = tools(root)
    call(t["read_file"], path="f")
    (root / "f").write_bytes(b"changed\n")
    result = call(t["write_file"], path="f", content="b\n")
    assert result.error_code is ErrorCode.STALE_FILE
    assert (root / "f").read_bytes() == b"changed\n"


@pytest.mark.parametrize(
    ("path", "code"),
    [
        ("n.txt", ErrorCode.OUTSIDE_WORKSPACE),
        ("dangling.txt", ErrorCode.OUTSIDE_WORKSPACE),
        ("l/passwd", ErrorCode.OUTSIDE_WORKSPACE),
        ("chain.txt", ErrorCode.OUTSIDE_WORKSPACE),
        ("../outside/secret.txt", ErrorCode.OUTSIDE_WORKSPACE),
        ("a/../../outside/secret.txt", ErrorCode.OUTSIDE_WORKSPACE),
        ("../w-evil/x.txt", ErrorCode.OUTSIDE_WORKSPACE),
        ("{tmp}/outside/secret.txt", ErrorCode.OUTSIDE_WORKSPACE),
        ("{tmp}/w-evil/x.txt", ErrorCode.OUTSIDE_WORKSPACE),
        ("x\x00.txt", ErrorCode.INVALID_ARGUMENTS),
        ("", ErrorCode.INVALID_ARGUMENTS),
    ],
)
def test_writes_never_leave_the_root(
    tmp_path: Path, root: Path, path: str, code: ErrorCode
) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "secret.txt").write_bytes(b"secret\n")
    (outside / "passwd").write_bytes(b"root:x\n")
    (tmp_path / "w-evil").mkdir()
    (root / "n.txt").symlink_to(outside / "secret.txt")
    (root / "dangling.txt").symlink_to(outside / "missing.txt")
    (root / "l").symlink_to(outside)
    (root / "chain.txt").symlink_to("n.txt")
    before = sorted((p, p.read_bytes()) for p in tmp_path.rglob("*") if p.is_file())
    t = tools(root)
    named = path.format(tmp=tmp_path)
    for name, extra in (
        ("write_file", {"content": "pwned\n"}),
        ("edit_file", {"old_text": "secret", "new_text": "pwned"}),
        ("read_file", {}),
    ):
        result = call(t[name], path=named, **extra)
        assert result.error_code is code, name
    after = sorted((p, p.read_bytes()) for p in tmp_path.rglob("*") if p.is_file())
    assert after == before
    assert not (outside / "missing.txt").exists()
    assert not (tmp_path / "w-evil" / "x.txt").exists()


def test_directory_path_is_refused(root: Path) -> None:
    result = call(tools(root)["write_file"], path="newdir/", content="x")
    assert result.error_code is ErrorCode.INVALID_ARGUMENTS
    assert list(root.iterdir()) == []


def test_link_inside_the_root_writes_its_target(root: Path) -> None:
    (root / "real.txt").write_bytes(b"a\n")
    (root / "link.txt").symlink_to("real.txt")
    result = call(tools(root)["write_file"], path="link.txt", content="b\n")
    assert result.content["path"] == "link.txt"
    assert (root / "link.txt").is_symlink()
    assert (root / "real.txt").read_bytes() == b"b\n"


_KILLED_WRITER = textwrap.dedent(
    """
    import os, sys, time
    from workspace_tools import workspace_tools, invoke_tool_sync

    def stall(*args, **kwargs):
        print("renaming", flush=True)
        time.sleep(600)

    os.replace = stall
    write = {t.name: t for t in workspace_tools(sys.argv[1])}["write_file"]
    invoke_tool_sync(write, {"path": "f.txt", "content": "new content\\n" * 1000})
    """
)


def test_writer_killed_before_rename_leaves_old_file(root: Path) -> None:
    (root / "f.txt").write_bytes(b"old content\n")
    child = subprocess.Popen(
        [sys.executable, "-c", _KILLED_WRITER, str(root)],
        stdout=subprocess.PIPE,
        cwd=Path(__file__).resolve().parents[2],
        env={**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2])},
    )
    try:
        assert child.stdout is not None
        assert child.stdout.readline() == b"renaming\n"  # blocks until the temp file is done
        child.send_signal(signal.SIGKILL)
    finally:
        child.wait(timeout=30)
    assert child.returncode == -signal.SIGKILL
    assert (root / "f.txt").read_bytes() == b"old content\n"
    temps = [p.name for p in root.iterdir() if p.name != "f.txt"]
    assert len(temps) == 1
    assert temps[0].startswith(".f.txt.")
    assert (root / temps[0]).read_bytes() == b"new content\n" * 1000
