"""apply_patch's rollback leaves the host as it was (directories an Add made, owners and
modes of deleted files), and Delete File takes binary files, as git does."""

from __future__ import annotations

import os
import shutil
import stat
import subprocess
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.file_support import call, tools
from workspace_tools import ErrorCode
from workspace_tools.tools import apply_patch

BINARY = b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR\x00\xff"
# git's blob id of BINARY (git hash-object), checked against git below.
BINARY_BLOB = "1584994e90d7fe585d7869c6f5392b405229675c"
UNCHANGED = "No file was changed: correct this part and send the whole patch again."


@pytest.fixture
def root(tmp_path: Path) -> Path:
    path = tmp_path / "w"
    path.mkdir()
    (path / "x.txt").write_bytes(b"one\ntwo\n")
    return path


def patch(*operations: str) -> str:
    return "*** Begin Patch\n" + "".join(operations) + "*** End Patch\n"


UPDATE_X = "*** Update File: x.txt\n@@\n-two\n+TWO\n"


def host(root: Path) -> dict[str, tuple[Any, ...]]:
    """Every entry below ``root`` as the host sees it: type, mode, owner, group, bytes."""
    out: dict[str, tuple[Any, ...]] = {}
    for path in sorted(root.rglob("*")):
        st = path.lstat()
        kind = "dir" if stat.S_ISDIR(st.st_mode) else "file"
        data = path.read_bytes() if kind == "file" else None
        out[path.relative_to(root).as_posix()] = (
            kind,
            oct(stat.S_IMODE(st.st_mode)),
            st.st_uid,
            st.st_gid,
            data,
        )
    return out


@pytest.fixture
def failing_write(monkeypatch: pytest.MonkeyPatch) -> Iterator[Callable[..., None]]:
    """Make the landing of ``x.txt``'s new content (its rename, once every file is staged)
    fail with a full disk (after ``before`` runs); the rollback's writes go through."""
    real = apply_patch._put
    hooks: list[Callable[[], None]] = []

    def put(batch: Any, path: Any) -> None:
        if path.rel == "x.txt":
            for hook in hooks:
                hook()
            raise apply_patch.ToolError("No space left on device", ErrorCode.DISK_FULL)
        real(batch, path)

    monkeypatch.setattr(apply_patch, "_put", put)

    def before(hook: Callable[[], None]) -> None:
        hooks.append(hook)

    yield before


def test_a_failed_patch_removes_the_directories_its_add_made(
    root: Path, failing_write: Callable[..., None]
) -> None:
    (root / "pkg").mkdir()
    before = host(root)
    result = call(
        tools(root)["apply_patch"],
        patch=patch(
            "*** Add File: new/deep/er/a.txt\n+a\n",
            "*** Add File: pkg/sub/b.txt\n+b\n",
            UPDATE_X,
        ),
    )
    assert result.error_code is ErrorCode.DISK_FULL, result.error
    assert result.error == f"No space left on device\n{UNCHANGED}"
    assert host(root) == before  # pkg/ stays (it was there), new/ and pkg/sub/ are gone


def test_a_directory_someone_else_wrote_into_meanwhile_is_kept(
    root: Path, failing_write: Callable[..., None]
) -> None:
    failing_write(lambda: (root / "new" / "theirs.txt").write_bytes(b"theirs"))
    result = call(
        tools(root)["apply_patch"],
        patch=patch("*** Add File: new/sub/a.txt\n+a\n", UPDATE_X),
    )
    assert result.error_code is ErrorCode.DISK_FULL, result.error
    assert sorted(p.relative_to(root).as_posix() for p in root.rglob("*")) == [
        "new",
        "new/theirs.txt",
        "x.txt",
    ]
    assert (root / "x.txt").read_bytes() == b"one\ntwo\n"


@pytest.mark.skipif(os.geteuid() != 0, reason="setting another owner needs root")
def test_a_deleted_file_put_back_keeps_its_owner_group_and_mode(
    root: Path, failing_write: Callable[..., None]
) -> None:
    (root / "owned.txt").write_bytes(b"kept\r\n")
    (root / "image.bin").write_bytes(BINARY)
    for name, mode in (("owned.txt", 0o640), ("image.bin", 0o600)):
        os.chown(root / name, 65534, 65534)
        os.chmod(root / name, mode)
    before = host(root)
    assert before["owned.txt"][1:4] == ("0o640", 65534, 65534)
    result = call(
        tools(root)["apply_patch"],
        patch=patch("*** Delete File: owned.txt\n", "*** Delete File: image.bin\n", UPDATE_X),
    )
    assert result.error_code is ErrorCode.DISK_FULL, result.error
    assert host(root) == before


def test_delete_file_removes_a_binary_file_with_git_s_diff(root: Path, tmp_path: Path) -> None:
    (root / "image.bin").write_bytes(BINARY)
    os.chmod(root / "image.bin", 0o755)
    oracle = subprocess.run(
        ["git", "hash-object", "--stdin"], input=BINARY, capture_output=True, check=True
    )
    assert oracle.stdout.decode().strip() == BINARY_BLOB
    scratch = tmp_path / "git"
    shutil.copytree(root, scratch)

    result = call(tools(root)["apply_patch"], patch=patch("*** Delete File: image.bin\n", UPDATE_X))
    assert result.error is None, result.error
    assert result.content == "Success. Updated the following files:\nD image.bin\nM x.txt"
    assert not (root / "image.bin").exists()
    deletion = result.details.files[0]
    assert (deletion.path, deletion.action, deletion.additions, deletion.deletions) == (
        "image.bin",
        "delete",
        0,
        0,
    )
    assert deletion.diff == (
        "diff --git a/image.bin b/image.bin\n"
        "deleted file mode 100755\n"
        f"index {BINARY_BLOB}..{'0' * 40}\n"
        "Binary files a/image.bin and /dev/null differ\n"
    )
    # git applies the diffs to a copy of the tree as it was: the same tree results.
    diff = "".join(entry.diff for entry in result.details.files)
    subprocess.run(["git", "apply", "-"], input=diff.encode(), cwd=scratch, check=True)
    assert host(scratch) == host(root)


def test_git_refuses_the_binary_deletion_of_other_bytes(root: Path, tmp_path: Path) -> None:
    (root / "image.bin").write_bytes(BINARY)
    result = call(tools(root)["apply_patch"], patch=patch("*** Delete File: image.bin\n"))
    assert result.error is None, result.error
    (tmp_path / "other").mkdir()
    (tmp_path / "other" / "image.bin").write_bytes(BINARY + b"x")
    check = subprocess.run(
        ["git", "apply", "--check", "-"],
        input=result.details.files[0].diff.encode(),
        cwd=tmp_path / "other",
        capture_output=True,
    )
    assert check.returncode == 1, check
    assert b"does not match the current contents" in check.stderr


@pytest.mark.parametrize(
    "operations",
    [
        ("*** Update File: image.bin\n@@\n-a\n+b\n",),
        ("*** Add File: image.bin\n+text\n",),
        ("*** Update File: x.txt\n*** Move to: image.bin\n@@\n-two\n+TWO\n",),
        ("*** Update File: image.bin\n*** Move to: moved.bin\n@@\n-a\n+b\n",),
        ("*** Delete File: image.bin\n", "*** Add File: image.bin\n+text\n"),
    ],
)
def test_other_operations_on_a_binary_file_are_refused_whole(
    root: Path, operations: tuple[str, ...]
) -> None:
    (root / "image.bin").write_bytes(BINARY)
    before = host(root)
    result = call(tools(root)["apply_patch"], patch=patch(*operations), allow_overwrite=True)
    assert result.error_code is ErrorCode.BINARY_FILE, result.error
    assert result.error == (
        "image.bin is binary (NUL bytes in its first 8 KiB); the text tools "
        "neither show nor change binary files; apply_patch can delete a binary file, but "
        f"not add over, update or move it\n{UNCHANGED}"
    )
    assert host(root) == before
