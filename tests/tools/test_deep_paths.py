"""Paths thousands of levels deep: every file tool gives the exact result, and the work it
asks of the kernel grows linearly with the depth (a hostile tree must not stall an agent).

The trees are made and checked by fd, one level at a time: a path of 2,100 levels is past
``PATH_MAX`` (4,096 bytes), which the kernel refuses in one string.
"""

from __future__ import annotations

import os
import resource
import subprocess
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.file_support import call, tools
from workspace_tools import ErrorCode, ToolSession, Workspace, invoke_tool_sync
from workspace_tools.adapters.anthropic_text_editor import text_editor_tool
from workspace_tools.session._checkpoints import Checkpoints
from workspace_tools.tools import apply_patch

_DIR = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW


def make_chain(root: Path, depth: int, name: str = "d") -> None:
    """``root/d/d/.../d`` (``depth`` levels) with ``f.txt`` at the bottom."""
    fd = os.open(root, _DIR)
    try:
        for _ in range(depth):
            os.mkdir(name, dir_fd=fd)
            child = os.open(name, _DIR, dir_fd=fd)
            os.close(fd)
            fd = child
        out = os.open("f.txt", os.O_WRONLY | os.O_CREAT, 0o644, dir_fd=fd)
        os.write(out, b"one\ntwo\nthree\n")
        os.close(out)
    finally:
        os.close(fd)


def walk_to(root: Path, rel_dir: str) -> int:
    """An fd of ``rel_dir`` reached from ``root`` one name at a time (the caller closes)."""
    fd = os.open(root, _DIR)
    for part in filter(None, rel_dir.split("/")):
        try:
            child = os.open(part, _DIR, dir_fd=fd)
        finally:
            os.close(fd)
        fd = child
    return fd


def read_at(root: Path, rel: str) -> bytes | None:
    """The bytes of the file ``rel``, ``None`` when it (or a directory above it) is absent."""
    head, _, name = rel.rpartition("/")
    try:
        fd = walk_to(root, head)
    except FileNotFoundError:
        return None
    try:
        out = os.open(name, os.O_RDONLY | os.O_NOFOLLOW, dir_fd=fd)
    except FileNotFoundError:
        return None
    finally:
        os.close(fd)
    with os.fdopen(out, "rb") as handle:
        return handle.read()


def names_at(root: Path, rel_dir: str) -> list[str]:
    fd = walk_to(root, rel_dir)
    try:
        return sorted(os.listdir(fd))
    finally:
        os.close(fd)


@pytest.fixture
def deep_root(tmp_path: Path) -> Iterator[Path]:
    root = tmp_path / "w"
    root.mkdir()
    yield root
    # shutil.rmtree recurses once a level (Python's recursion limit); rm walks by fd.
    subprocess.run(["rm", "-rf", str(root)], check=True)


def patch(*operations: str) -> str:
    return "*** Begin Patch\n" + "".join(operations) + "*** End Patch\n"


@pytest.mark.parametrize("depth", [1_500, 2_100])
def test_every_file_tool_works_at_depth(deep_root: Path, depth: int) -> None:
    make_chain(deep_root, depth)
    t = tools(Workspace(deep_root, fsync=False))
    deep = "d/" * depth
    if depth == 2_100:
        assert len(deep) > 4096  # past PATH_MAX: only a walk by fd reaches it

    result = call(t["read_file"], path=deep + "f.txt")
    assert result.error is None, result.error
    assert result.details.total_lines == 3
    assert "two" in result.content

    # A new file two new directories further down, then an overwrite.
    result = call(t["write_file"], path=deep + "n/m/new.txt", content="x\ny\n")
    assert result.error is None, result.error
    assert result.content == {"path": deep + "n/m/new.txt", "created": True, "lines": 2, "bytes": 4}
    assert read_at(deep_root, deep + "n/m/new.txt") == b"x\ny\n"
    result = call(t["write_file"], path=deep + "n/m/new.txt", content="z\n")
    assert result.error is None, result.error
    assert read_at(deep_root, deep + "n/m/new.txt") == b"z\n"

    result = call(t["edit_file"], path=deep + "f.txt", old_text="two", new_text="TWO")
    assert result.error is None, result.error
    assert read_at(deep_root, deep + "f.txt") == b"one\nTWO\nthree\n"

    result = call(
        t["apply_patch"],
        patch=patch(
            f"*** Update File: {deep}f.txt\n@@\n one\n-TWO\n+2\n",
            f"*** Add File: {deep}a/b.txt\n+added\n",
            f"*** Update File: {deep}n/m/new.txt\n*** Move to: {deep}moved.txt\n@@\n-z\n+moved\n",
        ),
    )
    assert result.error is None, result.error
    assert read_at(deep_root, deep + "f.txt") == b"one\n2\nthree\n"
    assert read_at(deep_root, deep + "a/b.txt") == b"added\n"
    assert read_at(deep_root, deep + "moved.txt") == b"moved\n"
    assert read_at(deep_root, deep + "n/m/new.txt") is None

    result = call(t["apply_patch"], patch=patch(f"*** Delete File: {deep}a/b.txt\n"))
    assert result.error is None, result.error
    assert names_at(deep_root, deep) == ["a", "f.txt", "moved.txt", "n"]
    assert names_at(deep_root, deep + "a") == []

    result = call(t["glob"], pattern="**/moved.txt")
    assert result.error is None, result.error
    assert result.details.matches == [deep + "moved.txt"]
    result = call(t["grep"], pattern="^moved$")
    assert result.error is None, result.error
    assert [(m.path, m.line) for m in result.details.matches] == [(deep + "moved.txt", 1)]
    result = call(t["list_files"], path=deep)
    assert result.error is None, result.error
    assert [e.path for e in result.details.entries] == [
        deep + "a",
        deep + "f.txt",
        deep + "moved.txt",
        deep + "n",
    ]


def test_a_deep_path_past_path_max_names_where_tools_start(
    deep_root: Path, clock_moved_on: None
) -> None:
    # A directory or file past PATH_MAX given as the place to start (discovery's `path`,
    # run_command's `cwd`, a glob without wildcards, the text editor's `view`, a patch's
    # Delete File) is found as the walk finds it, never refused as "too long".
    make_chain(deep_root, 2_100)
    os.symlink("f.txt", "link", dir_fd=(fd := walk_to(deep_root, "d/" * 2_100)))
    os.close(fd)
    t = tools(Workspace(deep_root, fsync=False))
    deep = "d/" * 2_100
    assert len(deep) > 4096

    result = call(t["list_files"], path=deep)
    assert result.error is None, result.error
    assert [e.path for e in result.details.entries] == [deep + "f.txt", deep + "link"]
    result = call(t["glob"], pattern="*.txt", path=deep)
    assert (result.error, result.details.matches) == (None, [deep + "f.txt"]), result.error
    result = call(t["glob"], pattern=deep + "f.txt")
    assert (result.error, result.details.matches) == (None, [deep + "f.txt"]), result.error
    result = call(t["grep"], pattern="two", path=deep)
    assert result.error is None, result.error
    assert [(m.path, m.line) for m in result.details.matches] == [(deep + "f.txt", 2)]
    result = call(t["grep"], pattern="two", path=deep + "f.txt")
    assert [(m.path, m.line) for m in result.details.matches] == [(deep + "f.txt", 2)]
    result = call(t["run_command"], command="cat f.txt; pwd | wc -c", cwd=deep)
    assert result.error is None, result.error
    assert result.content["stdout"] == f"one\ntwo\nthree\n{len(str(deep_root)) + 2 * 2_100 + 1}\n"

    result = call(t["apply_patch"], patch=patch(f"*** Delete File: {deep}link\n"))
    assert result.error_code == ErrorCode.INVALID_ARGUMENTS, result.error
    assert result.error.startswith(f"Delete File: {deep}link is a symbolic link (to f.txt)")

    # A session serves the repeated search from its cache: the fingerprint of a directory
    # past PATH_MAX is taken as the walk reaches it.
    with ToolSession(deep_root) as session:
        first = session.call_sync("grep", {"pattern": "two", "path": deep})
        second = session.call_sync("read_file", {"path": deep + "f.txt"})
        again = session.call_sync("grep", {"pattern": "two", "path": deep})
        twice = session.call_sync("read_file", {"path": deep + "f.txt"})
    assert (first.error, second.error) == (None, None), (first.error, second.error)
    assert (again.content, twice.content) == (first.content, second.content)
    assert [s.cached for s in session.record().steps] == [False, False, True, True]

    editor = text_editor_tool(Workspace(deep_root, fsync=False))
    result = invoke_tool_sync(editor, {"command": "view", "path": deep + "f.txt"})
    assert result.error is None, result.error
    assert result.model_text().endswith("     1\tone\n     2\ttwo\n     3\tthree\n")
    result = invoke_tool_sync(editor, {"command": "view", "path": deep})
    assert result.error is None, result.error
    assert result.model_text().splitlines()[1:] == [deep + "f.txt", deep + "link"]


def test_a_failed_patch_removes_the_deep_directories_its_add_made(
    deep_root: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    make_chain(deep_root, 300)
    real = apply_patch._put

    def put(batch: Any, path: Any) -> None:
        if path.rel.endswith("f.txt"):
            raise apply_patch.ToolError("No space left on device", ErrorCode.DISK_FULL)
        real(batch, path)

    monkeypatch.setattr(apply_patch, "_put", put)
    deep = "d/" * 300
    new = "/".join(["n"] * 1_200)
    result = call(
        tools(deep_root)["apply_patch"],
        patch=patch(
            f"*** Add File: {deep}{new}/a.txt\n+a\n",
            f"*** Update File: {deep}f.txt\n@@\n-two\n+TWO\n",
        ),
    )
    assert result.error_code is ErrorCode.DISK_FULL, result.error
    assert names_at(deep_root, deep) == ["f.txt"]  # the 1,200 new levels are gone
    assert read_at(deep_root, deep + "f.txt") == b"one\ntwo\nthree\n"


# The syscalls that take a path: the kernel looks up each component of the string it is
# given, so the work of a call is the sum of the components it hands over.
_PATH_CALLS = ("open", "stat", "lstat", "readlink", "mkdir", "rmdir", "unlink", "replace")
_PATH_CALLS += ("rename", "scandir", "listdir", "access", "chmod", "utime")


@pytest.fixture
def lookups(monkeypatch: pytest.MonkeyPatch) -> Callable[[], int]:
    """Count the path components the process hands the kernel from now on."""
    count = [0]

    def counted(real: Callable[..., Any]) -> Callable[..., Any]:
        def call_counted(*args: Any, **kwargs: Any) -> Any:
            path = args[0] if args else None
            if isinstance(path, (str, bytes, os.PathLike)):
                text = os.fsdecode(path)
                count[0] += text.count("/") + 1
            else:
                count[0] += 1  # an fd, or the current directory
            return real(*args, **kwargs)

        return call_counted

    for name in _PATH_CALLS:
        monkeypatch.setattr(os, name, counted(getattr(os, name)))
    return lambda: count[0]


def _operations(deep: str) -> dict[str, tuple[str, dict[str, Any]]]:
    return {
        "read_file": ("read_file", {"path": deep + "f.txt"}),
        "write_file new": ("write_file", {"path": deep + "n/m/new.txt", "content": "x\n"}),
        "write_file overwrite": ("write_file", {"path": deep + "f.txt", "content": "one\n"}),
        "edit_file": ("edit_file", {"path": deep + "f.txt", "old_text": "one", "new_text": "1"}),
        "apply_patch": (
            "apply_patch",
            {
                "patch": patch(
                    f"*** Add File: {deep}p/q.txt\n+q\n",
                    f"*** Update File: {deep}f.txt\n@@\n-1\n+one\n",
                    f"*** Update File: {deep}n/m/new.txt\n*** Move to: {deep}r.txt\n@@\n-x\n+r\n",
                    f"*** Delete File: {deep}p/q.txt\n",
                )
            },
        ),
        "list_files": ("list_files", {"path": deep}),
        "list_files recursive": ("list_files", {"path": ".", "recursive": True}),
        "glob": ("glob", {"pattern": "**/r.txt"}),
        "grep": ("grep", {"pattern": "three"}),
        "read_file missing": ("read_file", {"path": deep + "Missing.txt"}),
    }


def _work(base: Path, depth: int, lookups: Callable[[], int]) -> dict[str, int]:
    root = base / f"w{depth}"
    root.mkdir()
    try:
        make_chain(root, depth)
        t = tools(Workspace(root, fsync=False))
        out: dict[str, int] = {}
        for label, (name, arguments) in _operations("d/" * depth).items():
            before = lookups()
            result = call(t[name], **arguments)
            if label != "read_file missing":
                assert result.error is None, (label, result.error)
            out[label] = lookups() - before
        return out
    finally:
        subprocess.run(["rm", "-rf", str(root)], check=True)


def test_the_kernel_work_of_each_tool_grows_linearly_with_the_depth(
    tmp_path: Path, lookups: Callable[[], int]
) -> None:
    # Four times the depth: linear work is at most four times as much (plus what does
    # not depend on the depth), quadratic sixteen times.
    shallow = _work(tmp_path, 100, lookups)
    deep = _work(tmp_path, 400, lookups)
    ratios = {label: deep[label] / shallow[label] for label in shallow}
    assert all(ratio < 5 for ratio in ratios.values()), (shallow, deep, ratios)


def _undo_work(base: Path, levels: int, lookups: Callable[[], int]) -> int:
    """Lookups of a checkpointed write that makes ``levels`` new directories, and its undo;
    the undo must leave the tree exactly as it was."""
    root = base / f"u{levels}"
    root.mkdir()
    try:
        make_chain(root, 3)
        workspace = Workspace(root, fsync=False)
        checkpoints = Checkpoints(workspace)
        try:
            before = lookups()
            checkpoints.before()
            path = "n/" * levels + "new.txt"
            result = call(tools(workspace)["write_file"], path=path, content="new\n")
            assert result.error is None, result.error
            checkpoints.after(0)
            assert read_at(root, path) == b"new\n"
            restored = checkpoints.restore(0)
            work = lookups() - before
        finally:
            checkpoints.close()
        assert restored.applied, restored
        assert (restored.conflicts, restored.not_restorable) == ([], [])
        assert names_at(root, "") == ["d"]
        assert read_at(root, "d/d/d/f.txt") == b"one\ntwo\nthree\n"
        return work
    finally:
        subprocess.run(["rm", "-rf", str(root)], check=True)


def test_undoing_a_deep_change_restores_it_exactly_with_linear_work(
    tmp_path: Path, lookups: Callable[[], int]
) -> None:
    shallow = _undo_work(tmp_path, 100, lookups)
    deep = _undo_work(tmp_path, 400, lookups)
    assert deep < 5 * shallow, (shallow, deep)


@pytest.fixture
def few_fds() -> Iterator[None]:
    """The process may hold 256 fds: fewer than the tree has levels."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (256, hard))
    try:
        yield
    finally:
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))


def test_a_tree_deeper_than_the_fd_limit_is_searched_whole(deep_root: Path, few_fds: None) -> None:
    make_chain(deep_root, 1_000)
    t = tools(Workspace(deep_root, fsync=False))
    deep = "d/" * 1_000
    result = call(t["grep"], pattern="^three$")
    assert result.error is None, result.error
    assert [(m.path, m.line) for m in result.details.matches] == [(deep + "f.txt", 3)]
    result = call(t["glob"], pattern="**/f.txt")
    assert result.details.matches == [deep + "f.txt"], result.error
