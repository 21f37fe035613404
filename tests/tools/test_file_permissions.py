"""write_file and edit_file obey the file's permissions as ``echo > file`` does; a full or
read-only file system is reported as such and leaves the file as it was.

The host runs the suite as root: "another user" is a child forked from this process that
drops to ``nobody`` (the package is already imported, so it needs no access to the venv),
working in a directory made for it outside pytest's private temp tree.
"""

from __future__ import annotations

import errno
import os
import pwd
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests._users import as_nobody
from tests.file_support import call, tools
from workspace_tools import ErrorCode, Workspace
from workspace_tools.workspace import _files
from workspace_tools.workspace import _state as workspace_state
from workspace_tools.workspace._files import os_error

IS_ROOT = os.geteuid() == 0
needs_root = pytest.mark.skipif(not IS_ROOT, reason="needs root (to be another user, mount)")


@pytest.fixture
def root(tmp_path: Path) -> Path:
    path = tmp_path / "w"
    path.mkdir()
    return path


def _edit(tool_set: dict[str, Any], path: str) -> Any:
    return call(tool_set["edit_file"], path=path, old_text="old", new_text="new")


def _write(tool_set: dict[str, Any], path: str) -> Any:
    return call(tool_set["write_file"], path=path, content="new\n")


CHANGES = {"write_file": _write, "edit_file": _edit}


def _state(path: Path) -> tuple[bytes, int, int, int, int]:
    info = path.stat()
    return path.read_bytes(), info.st_mode & 0o7777, info.st_uid, info.st_gid, info.st_ino


# --- mode bits -------------------------------------------------------------------------


@pytest.mark.parametrize("tool_name", list(CHANGES))
@pytest.mark.parametrize("mode", [0o444, 0o400, 0o555])
def test_file_without_write_permission_is_refused(root: Path, tool_name: str, mode: int) -> None:
    target = root / "f.txt"
    target.write_bytes(b"old\n")
    target.chmod(mode)
    before = _state(target)
    result = CHANGES[tool_name](tools(root), "f.txt")
    assert (result.error_code, result.error) == (
        ErrorCode.PERMISSION_DENIED,
        f"Permission denied: f.txt is read-only (mode {mode:04o}); the file was left unchanged",
    )
    assert _state(target) == before
    assert sorted(os.listdir(root)) == ["f.txt"]


@needs_root
@pytest.mark.parametrize("tool_name", list(CHANGES))
def test_root_writes_read_only_files_only_when_opted_in(root: Path, tool_name: str) -> None:
    target = root / "f.txt"
    target.write_bytes(b"old\n")
    target.chmod(0o444)
    tool_set = tools(Workspace(root, write_read_only_files=True))
    result = CHANGES[tool_name](tool_set, "f.txt")
    assert result.error is None, result.error
    assert target.read_bytes() == b"new\n"
    assert target.stat().st_mode & 0o7777 == 0o444


@needs_root
@pytest.mark.parametrize(("uid", "gid", "mode"), [(65534, 65534, 0o640), (1234, 0, 0o2664)])
def test_replaced_file_keeps_owner_group_and_mode(
    root: Path, uid: int, gid: int, mode: int
) -> None:
    target = root / "f.txt"
    target.write_bytes(b"old\n")
    os.chown(target, uid, gid)
    target.chmod(mode)
    assert _write(tools(root), "f.txt").error is None
    info = target.stat()
    assert (target.read_bytes(), info.st_uid, info.st_gid, info.st_mode & 0o7777) == (
        b"new\n",
        uid,
        gid,
        mode,
    )


# --- another user (a child as nobody) ----------------------------------------------------


@pytest.fixture
def shared_root() -> Iterator[Path]:
    """A workspace root that ``nobody`` can reach (pytest's temp tree is root's alone)."""
    path = Path(tempfile.mkdtemp(prefix="wt-perm-"))
    path.chmod(0o777)
    yield path
    shutil.rmtree(path)


def _outcome(result: Any) -> list[Any]:
    return [result.error_code and result.error_code.value, result.error]


@needs_root
@pytest.mark.parametrize("tool_name", list(CHANGES))
def test_file_of_another_user_is_refused_though_its_directory_is_writable(
    shared_root: Path, tool_name: str
) -> None:
    target = shared_root / "f.txt"
    target.write_bytes(b"old\n")
    target.chmod(0o644)
    before = _state(target)
    seen = as_nobody(lambda: _outcome(CHANGES[tool_name](tools(shared_root), "f.txt")))
    assert seen == [
        "PERMISSION_DENIED",
        "Permission denied: f.txt is not writable by this process (mode 0644, owner uid 0, "
        "group gid 0); the file was left unchanged",
    ]
    assert _state(target) == before
    assert sorted(os.listdir(shared_root)) == ["f.txt"]


@needs_root
@pytest.mark.parametrize("dir_mode", [0o777, 0o755], ids=["dir_writable", "dir_read_only"])
@pytest.mark.parametrize("tool_name", list(CHANGES))
def test_group_writable_file_of_another_user_is_written_keeping_its_owner(
    shared_root: Path, tool_name: str, dir_mode: int
) -> None:
    work = shared_root / "d"
    work.mkdir()
    work.chmod(dir_mode)
    target = work / "f.txt"
    target.write_bytes(b"old\n")
    nogroup = pwd.getpwnam("nobody").pw_gid
    os.chown(target, 0, nogroup)
    target.chmod(0o664)
    inode = target.stat().st_ino
    seen = as_nobody(lambda: _outcome(CHANGES[tool_name](tools(shared_root), "d/f.txt")))
    assert seen == [None, None]
    # Rewritten in place: the rename would have made the file nobody's.
    assert _state(target) == (b"new\n", 0o664, 0, nogroup, inode)
    assert sorted(os.listdir(work)) == ["f.txt"]


@needs_root
def test_new_file_in_a_directory_of_another_user_is_refused(shared_root: Path) -> None:
    (shared_root / "sub").mkdir(mode=0o755)
    seen = as_nobody(lambda: _outcome(_write(tools(shared_root), "sub/new.txt")))
    assert seen == [
        "PERMISSION_DENIED",
        "Permission denied: cannot create sub/new.txt: the directory sub is not writable by "
        "this process; nothing was written",
    ]
    assert os.listdir(shared_root / "sub") == []


@needs_root
@pytest.mark.parametrize(
    ("tool_name", "arguments"),
    [
        ("list_files", {"path": "secret"}),
        ("list_files", {"path": "secret", "recursive": True, "include_ignored": True}),
        ("glob", {"pattern": "**/*", "path": "secret"}),
        ("grep", {"pattern": "x", "path": "secret"}),
    ],
)
def test_discovery_in_an_unreadable_directory_is_an_error(
    shared_root: Path, tool_name: str, arguments: dict[str, Any]
) -> None:
    secret = shared_root / "secret"
    secret.mkdir(mode=0o700)
    (secret / "a.txt").write_bytes(b"x\n")

    def work() -> list[Any]:
        tool_set = tools(shared_root)
        listing = call(tool_set["list_files"], path=".")
        return [_outcome(call(tool_set[tool_name], **arguments)), listing.content]

    assert as_nobody(work) == [
        [
            "PERMISSION_DENIED",
            "Permission denied: the directory 'secret' is not readable by this process",
        ],
        "secret/",
    ]


# --- attributes, read-only and full file systems ----------------------------------------


@needs_root
@pytest.mark.parametrize("attribute", ["+i", "+a"], ids=["immutable", "append_only"])
@pytest.mark.parametrize("tool_name", list(CHANGES))
def test_immutable_and_append_only_files_are_refused(
    root: Path, attribute: str, tool_name: str
) -> None:
    target = root / "f.txt"
    target.write_bytes(b"old\n")
    if shutil.which("chattr") is None:
        pytest.skip("chattr is not installed")
    if subprocess.run(["chattr", attribute, str(target)], capture_output=True).returncode:
        pytest.skip(f"chattr {attribute} is not supported here")
    try:
        before = _state(target)
        result = CHANGES[tool_name](tools(root), "f.txt")
        assert _state(target) == before
    finally:
        subprocess.run(["chattr", "-i", "-a", str(target)], check=True)
    assert (result.error_code, result.error) == (
        ErrorCode.PERMISSION_DENIED,
        "Permission denied: f.txt may not be changed (an immutable or append-only attribute, "
        "or a security policy, forbids it); the file was left unchanged",
    )
    assert sorted(os.listdir(root)) == ["f.txt"]


@pytest.fixture
def small_fs(tmp_path: Path) -> Iterator[Path]:
    """A 64 KiB tmpfs (root only; skipped where mounting is not allowed)."""
    mount = tmp_path / "small"
    mount.mkdir()
    done = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=64k,mode=0755", "tmpfs", str(mount)],
        capture_output=True,
    )
    if done.returncode:
        pytest.skip(f"cannot mount a tmpfs: {done.stderr.decode().strip()}")
    try:
        yield mount
    finally:
        subprocess.run(["umount", "-l", str(mount)], check=True)


@pytest.mark.parametrize("tool_name", list(CHANGES))
def test_full_disk_is_disk_full_and_leaves_the_old_file(small_fs: Path, tool_name: str) -> None:
    target = small_fs / "f.txt"
    target.write_bytes(b"old\n")
    (small_fs / "filler").write_bytes(b"." * 40_000)
    before = _state(target)
    tool_set = tools(small_fs)
    if tool_name == "write_file":
        result = call(tool_set["write_file"], path="f.txt", content="new\n" * 10_000)
    else:
        result = call(tool_set["edit_file"], path="f.txt", old_text="old", new_text="n" * 40_000)
    assert (result.error_code, result.error) == (
        ErrorCode.DISK_FULL,
        "Cannot write f.txt: no space left on the device; the file was left unchanged",
    )
    assert _state(target) == before
    assert sorted(os.listdir(small_fs)) == ["f.txt", "filler"]


def test_full_disk_creates_no_file(small_fs: Path) -> None:
    (small_fs / "filler").write_bytes(b"." * 40_000)
    result = call(tools(small_fs)["write_file"], path="new.txt", content="x" * 40_000)
    assert (result.error_code, result.error) == (
        ErrorCode.DISK_FULL,
        "Cannot write new.txt: no space left on the device; nothing was written",
    )
    assert sorted(os.listdir(small_fs)) == ["filler"]


def test_full_disk_in_place_rewrite_leaves_the_old_file(
    small_fs: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # As when the owner cannot be kept: the file is rewritten in place, and the space it
    # needs is reserved before any byte of it changes.
    monkeypatch.setattr(_files, "_take_owner", lambda fd, old: False)
    target = small_fs / "f.txt"
    target.write_bytes(b"old\n")
    (small_fs / "filler").write_bytes(b"." * 40_000)
    before = _state(target)
    result = call(tools(small_fs)["write_file"], path="f.txt", content="new\n" * 10_000)
    assert (result.error_code, result.error) == (
        ErrorCode.DISK_FULL,
        "Cannot write f.txt: no space left on the device; the file was left unchanged",
    )
    assert _state(target) == before
    assert sorted(os.listdir(small_fs)) == ["f.txt", "filler"]


def test_in_place_rewrite_writes_the_whole_content(
    root: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(_files, "_take_owner", lambda fd, old: False)
    target = root / "f.txt"
    target.write_bytes(b"old line\n" * 100)
    inode = target.stat().st_ino
    for content in ("short\n", "long\n" * 1000):
        result = call(tools(root)["write_file"], path="f.txt", content=content)
        assert result.error is None, result.error
        assert target.read_bytes() == content.encode()
    assert target.stat().st_ino == inode


@pytest.mark.parametrize("existing", [True, False], ids=["existing", "new"])
def test_read_only_file_system_is_refused(small_fs: Path, existing: bool) -> None:
    if existing:
        (small_fs / "f.txt").write_bytes(b"old\n")
    subprocess.run(["mount", "-o", "remount,ro", str(small_fs)], check=True)
    result = call(tools(small_fs)["write_file"], path="f.txt", content="new\n")
    outcome = "the file was left unchanged" if existing else "nothing was written"
    assert (result.error_code, result.error) == (
        ErrorCode.PERMISSION_DENIED,
        f"Cannot write f.txt: the file system is read-only; {outcome}",
    )
    assert os.listdir(small_fs) == (["f.txt"] if existing else [])


@pytest.mark.parametrize(
    ("number", "code", "message"),
    [
        (errno.ENOSPC, ErrorCode.DISK_FULL, "Cannot write a/f.txt: no space left on the device"),
        (errno.EDQUOT, ErrorCode.DISK_FULL, "Cannot write a/f.txt: the disk quota is exceeded"),
        (
            errno.EROFS,
            ErrorCode.PERMISSION_DENIED,
            "Cannot write a/f.txt: the file system is read-only",
        ),
        (
            errno.EFBIG,
            ErrorCode.FILE_TOO_LARGE,
            "Cannot write a/f.txt: over the file size limit of this process",
        ),
        (errno.EACCES, ErrorCode.PERMISSION_DENIED, "Permission denied: a/f.txt"),
    ],
)
def test_os_errors_of_a_write_map_to_codes(number: int, code: ErrorCode, message: str) -> None:
    error = os_error(
        OSError(number, os.strerror(number), ".f.txt.0123456789abcdef.wt-tmp"), "a/f.txt"
    )
    assert (error.code, error.message) == (code, message)


@needs_root
def test_discovery_below_names_what_it_could_not_read(shared_root: Path) -> None:
    """A recursive walk meets a directory and a file ``nobody`` may not read: each tool
    says so, instead of a listing or "No matches" that looks complete."""
    (shared_root / "open").mkdir()
    (shared_root / "open/a.txt").write_bytes(b"needle\n")
    (shared_root / "open/locked.txt").write_bytes(b"needle\n")
    (shared_root / "open/locked.txt").chmod(0o600)
    secret = shared_root / "secret"
    secret.mkdir(mode=0o700)
    (secret / "s.txt").write_bytes(b"needle\n")

    def work() -> list[Any]:
        tool_set = tools(shared_root)
        listing = call(tool_set["list_files"], path=".", recursive=True)
        found = call(tool_set["glob"], pattern="**/*.txt")
        searched = call(tool_set["grep"], pattern="needle")
        missing = call(tool_set["grep"], pattern="absent")
        return [
            [listing.content, listing.details.unreadable],
            [found.content, found.details.unreadable],
            [searched.content, searched.details.unreadable],
            missing.content,
        ]

    denied_dir = "[Permission denied: 1 path could not be read and was not {verb}: secret/]"
    denied_both = (
        "[Permission denied: 2 paths could not be read and were not searched: "
        "open/locked.txt, secret/]"
    )
    assert as_nobody(work) == [
        [
            "open/\nopen/a.txt\nopen/locked.txt\nsecret/\n" + denied_dir.format(verb="listed"),
            ["secret/"],
        ],
        [
            "open/a.txt\nopen/locked.txt\n" + denied_dir.format(verb="searched"),
            ["secret/"],
        ],
        ["open/a.txt:1:needle\n" + denied_both, ["open/locked.txt", "secret/"]],
        "No matches\n" + denied_both,
    ]


def test_in_place_rewrite_of_an_edit_written_in_pieces(
    root: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A large ASCII file's edit is written as the old bytes around the changed lines; in
    # place, every piece lands and the file is cut to their length.
    monkeypatch.setattr(_files, "_take_owner", lambda fd, old: False)
    monkeypatch.setattr(workspace_state, "KEPT_FILE_BYTES", 64)
    target = root / "f.txt"
    old = b"".join(b"line %d\n" % i for i in range(1000))
    target.write_bytes(old)
    inode = target.stat().st_ino
    edit = tools(root)["edit_file"]
    expected = old
    for before, after in (("line 500\n", "x\n"), ("x\n", "a much longer line 500\n")):
        result = call(edit, path="f.txt", old_text=before, new_text=after)
        assert result.error is None, result.error
        expected = expected.replace(before.encode(), after.encode())
        assert target.read_bytes() == expected
    assert target.stat().st_ino == inode
