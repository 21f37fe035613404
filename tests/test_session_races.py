"""Bad input and file system races never become exceptions: every call of a session or of
``invoke_tool`` ends in a result with a specific code and a message in words."""

from __future__ import annotations

import collections
import ctypes
import errno
import os
import shutil
import tempfile
import threading
from pathlib import Path
from typing import Any

import anyio
import pytest
from pydantic import BaseModel

from tests._fds import OUT_OF_FDS_WORDS
from tests._users import as_nobody
from workspace_tools import (
    ErrorCode,
    Policy,
    ToolSession,
    Workspace,
    invoke_tool,
    invoke_tool_sync,
    tool,
    workspace_tools,
)
from workspace_tools.cli._policy import policy_from_flags
from workspace_tools.tools import run_command
from workspace_tools.workspace import _paths

_AT_FDCWD = -100
_RENAME_EXCHANGE = 2


def _exchange(a: str, b: str) -> None:
    """Swap two paths atomically: ``renameat2(RENAME_EXCHANGE)``."""
    renameat2 = ctypes.CDLL(None, use_errno=True).renameat2
    if renameat2(_AT_FDCWD, a.encode(), _AT_FDCWD, b.encode(), _RENAME_EXCHANGE) != 0:
        code = ctypes.get_errno()
        raise OSError(code, os.strerror(code), a)


def _rename_pairs(a: str, b: str) -> None:
    """Swap two paths with three renames (a name is briefly gone)."""
    os.rename(a, a + ".swap")
    os.rename(b, a)
    os.rename(a + ".swap", b)


def _swapper(a: str, b: str) -> Any:
    """:func:`_exchange` where the C library and the file system have it, else
    :func:`_rename_pairs`."""
    try:
        _exchange(a, b)
        _exchange(a, b)
    except (AttributeError, OSError):  # no renameat2; or EINVAL, ENOSYS from the kernel
        return _rename_pairs
    return _exchange


@pytest.fixture
def swapping(tmp_path: Path) -> Any:
    """``root/sw`` is a directory one moment and a link to ``outside/`` the next: a thread
    swaps it with ``root/ln`` until the test ends. Yields the root, the outside directory
    and a one-item list counting the swaps."""
    root, outside = tmp_path / "root", tmp_path / "outside"
    (root / "sw" / "deep").mkdir(parents=True)
    outside.mkdir()
    for where in (root / "sw", root / "sw" / "deep", outside):
        (where / "a.txt").write_text("inside\n" if where != outside else "outside\n")
    (root / "ln").symlink_to(outside)
    pair = str(root / "sw"), str(root / "ln")
    swap = _swapper(*pair)
    stop = threading.Event()
    swaps = [0]

    def run() -> None:
        while not stop.is_set():
            swap(*pair)
            swaps[0] += 1

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    yield root, outside, swaps
    stop.set()
    thread.join(timeout=10)
    assert not thread.is_alive()


CALLS: list[tuple[str, dict[str, Any]]] = [
    ("read_file", {"path": "sw/a.txt"}),
    ("read_file", {"path": "sw/deep/a.txt"}),
    ("write_file", {"path": "sw/b.txt", "content": "x\n"}),
    ("edit_file", {"path": "sw/deep/a.txt", "old_text": "inside\n", "new_text": "inside\n\n"}),
    ("list_files", {"path": "sw", "recursive": True}),
    ("glob", {"pattern": "**/*.txt", "path": "sw"}),
    ("grep", {"pattern": "side", "path": "sw/deep"}),
    ("run_command", {"command": "exit 0", "cwd": "sw/deep"}),
]
# The calls' paths go through the swapping directory; so do the session's policy checks.
POLICY = policy_from_flags(
    [
        ("deny", "*:path=nowhere/**"),
        ("deny", "run_command:cwd=nowhere/**"),
        ("allow", "*"),
    ]
)


def test_calls_racing_a_directory_swap_all_end_in_results(swapping: Any) -> None:
    root, outside, swaps = swapping
    tools = {t.name: t for t in workspace_tools(root)}
    session = ToolSession(root, policy=POLICY, cache=False)
    outcomes: collections.Counter[tuple[str, str | None, str]] = collections.Counter()
    escaped: list[str] = []

    async def run_all() -> None:
        for index in range(1000):
            name, arguments = CALLS[index % len(CALLS)]
            try:
                if index % 2:
                    result = await session.call(name, arguments)
                else:
                    result = await invoke_tool(tools[name], arguments)
            except Exception as exc:
                escaped.append(f"{name}: {exc!r}")
                continue
            text = result.error or result.model_text()
            if "outside\n" in text:
                escaped.append(f"{name} read through the link: {text!r}")
            code = None if result.error_code is None else result.error_code.value
            outcomes[(name, code, (result.error or "")[:60])] += 1

    anyio.run(run_all)
    seen = "\n".join(f"{n} x {key}" for key, n in sorted(outcomes.items(), key=str))
    assert escaped == [], seen
    codes = {code for _, code, _ in outcomes}
    # Succeeded while it was a directory, refused while it was a link: the race was met.
    # NOT_FOUND: a command's working directory changed as it started.
    assert {None, "OUTSIDE_WORKSPACE"} <= codes <= {None, "OUTSIDE_WORKSPACE", "NOT_FOUND"}, seen
    assert not [m for _, _, m in outcomes if "Errno" in m], seen
    assert not (outside / "b.txt").exists()
    assert swaps[0] > 100, swaps


@pytest.mark.parametrize("error", [errno.EINVAL, errno.ENOENT])
def test_resolution_retries_after_a_link_changed_under_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, error: int
) -> None:
    (tmp_path / "a.txt").write_text("a\n")
    resolve = _paths._resolve
    failures = iter([OSError(error, os.strerror(error))] * (_paths._RESOLVE_ATTEMPTS - 1))

    def racing(path: str) -> Any:
        failure = next(failures, None)
        if failure is not None:
            raise failure  # what readlink says of a link swapped or removed mid-walk
        return resolve(path)

    workspace = Workspace(tmp_path)
    monkeypatch.setattr(_paths, "_resolve", racing)
    resolved = workspace.resolve("a.txt")
    assert (resolved.rel, resolved.real) == ("a.txt", tmp_path.resolve() / "a.txt")


def test_a_path_that_keeps_changing_is_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def racing(path: str) -> Any:
        raise OSError(errno.EINVAL, "Invalid argument", path)

    read_file = {t.name: t for t in workspace_tools(tmp_path)}["read_file"]
    monkeypatch.setattr(_paths, "_resolve", racing)
    result = invoke_tool_sync(read_file, {"path": "sw/a.txt"})
    assert (result.error_code, result.error) == (
        ErrorCode.OUTSIDE_WORKSPACE,
        "Path 'sw/a.txt' kept changing while it was resolved (a symbolic link in it was "
        "replaced 5 times over); its real location is unknown, so it is refused. Try again "
        "once it stops changing",
    )


LONG = "n" * 300
BAD_INPUTS = [
    (
        "run_command",
        {"command": "echo \ud800"},
        ErrorCode.INVALID_ARGUMENTS,
        "Invalid arguments for run_command:\n- command: Value error, contains '\\ud800', a "
        "character no command line can hold",
    ),
    (
        "read_file",
        {"path": "\ud800.txt"},
        ErrorCode.INVALID_ARGUMENTS,
        "Path '\\ud800.txt' contains '\\ud800', a character no file name can hold",
    ),
    (
        "list_files",
        {"path": f"d/{LONG}"},
        ErrorCode.INVALID_ARGUMENTS,
        f"Path d/{LONG} is too long: a name in it, or the whole path, is longer than the "
        "file system allows; use a shorter path",
    ),
    (
        "write_file",
        {"path": f"{LONG}.txt", "content": "x"},
        ErrorCode.INVALID_ARGUMENTS,
        f"Path {LONG}.txt is too long: a name in it, or the whole path, is longer than the "
        "file system allows; use a shorter path",
    ),
    (
        "read_file",
        {"path": f"d/{LONG}"},
        ErrorCode.INVALID_ARGUMENTS,
        f"Path d/{LONG} is too long: a name in it, or the whole path, is longer than the "
        "file system allows; use a shorter path",
    ),
    (
        "run_command",
        {"command": "true", "cwd": LONG},
        ErrorCode.INVALID_ARGUMENTS,
        f"Path {LONG} is too long: a name in it, or the whole path, is longer than the "
        "file system allows; use a shorter path",
    ),
    (
        "grep",
        # Past PATH_MAX, yet looked up one name at a time as the walk would: not there.
        {"pattern": "x", "path": "/".join(["d"] * 2100)},
        ErrorCode.NOT_FOUND,
        "Path '" + "/".join(["d"] * 2100) + "' does not exist; list_files on its parent shows "
        "what is there",
    ),
]


@pytest.mark.parametrize(("name", "arguments", "code", "message"), BAD_INPUTS)
def test_bad_input_gives_specific_codes_in_words(
    tmp_path: Path, name: str, arguments: dict[str, Any], code: ErrorCode, message: str
) -> None:
    (tmp_path / "d").mkdir()
    session = ToolSession(tmp_path, policy=policy_from_flags([("deny", "*:path=nowhere/**")]))
    direct = invoke_tool_sync({t.name: t for t in session.tools}[name], arguments)
    through_session = session.call_sync(name, arguments)
    for result in (direct, through_session):
        assert (result.error_code, result.error) == (code, message)
    assert sorted(os.listdir(tmp_path)) == ["d"]


def test_a_directory_that_may_not_be_searched_is_permission_denied() -> None:
    # Root searches any directory: as root, the call runs as nobody.
    root = Path(tempfile.mkdtemp(prefix="wt-perm-"))
    root.chmod(0o755)
    (root / "locked").mkdir()
    (root / "locked" / "a.txt").write_text("a\n")
    (root / "locked").chmod(0)

    def read() -> list[Any]:
        read_file = {t.name: t for t in workspace_tools(root)}["read_file"]
        result = invoke_tool_sync(read_file, {"path": "locked/a.txt"})
        return [result.error_code, result.error]

    try:
        seen = as_nobody(read) if os.geteuid() == 0 else read()
    finally:
        (root / "locked").chmod(0o755)
        shutil.rmtree(root)
    assert seen == ["PERMISSION_DENIED", "Permission denied: locked/a.txt"]


class _PathArgs(BaseModel):
    path: str


@pytest.mark.parametrize(
    ("raised", "code", "message"),
    [
        (
            OSError(errno.EIO, "Input/output error", "cache/blob"),
            ErrorCode.TOOL_ERROR,
            "Cannot access cache/blob: Input/output error",
        ),
        (
            TimeoutError("upstream did not answer"),
            ErrorCode.TOOL_ERROR,
            "upstream did not answer",
        ),
        (
            OSError(errno.EROFS, "Read-only file system"),
            ErrorCode.PERMISSION_DENIED,
            "Cannot write a.txt: the file system is read-only",
        ),
        (
            FileNotFoundError(errno.ENOENT, "No such file or directory"),
            ErrorCode.NOT_FOUND,
            "File not found: a.txt",
        ),
        (
            PermissionError(errno.EACCES, "Permission denied"),
            ErrorCode.PERMISSION_DENIED,
            "Permission denied: a.txt",
        ),
        (
            OSError(errno.ELOOP, "Too many levels of symbolic links"),
            ErrorCode.OUTSIDE_WORKSPACE,
            "a.txt, or a directory on its way, became a symbolic link during the call; it is "
            "not followed",
        ),
    ],
)
def test_an_os_error_from_any_tool_gets_the_code_of_its_errno(
    raised: OSError, code: ErrorCode, message: str
) -> None:
    def fail(args: _PathArgs, context: Any) -> str:
        raise raised

    touchy = tool(name="touchy", description="fails", parameters=_PathArgs, execute=fail)
    result = invoke_tool_sync(touchy, {"path": "a.txt"})
    assert (result.error_code, result.error) == (code, message)


@pytest.mark.parametrize(
    ("raised", "message"),
    [
        (
            BlockingIOError(errno.EAGAIN, "Resource temporarily unavailable"),
            "Resource temporarily unavailable",
        ),
        # Out of fds (a pipe, a socket pair, an epoll): what every tool says of it.
        (OSError(errno.EMFILE, "Too many open files"), OUT_OF_FDS_WORDS[errno.EMFILE]),
        (OSError(errno.ENFILE, "Too many open files in system"), OUT_OF_FDS_WORDS[errno.ENFILE]),
    ],
)
def test_an_os_error_naming_no_path_says_which_tool_failed(raised: OSError, message: str) -> None:
    class _NoPath(BaseModel):
        n: int = 0

    def fail(args: _NoPath, context: Any) -> str:
        raise raised

    spawner = tool(name="spawner", description="fails", parameters=_NoPath, execute=fail)
    result = invoke_tool_sync(spawner, {})
    assert (result.error_code, result.error) == (ErrorCode.TOOL_ERROR, f"spawner failed: {message}")


@pytest.mark.parametrize("number", sorted(OUT_OF_FDS_WORDS))
@pytest.mark.parametrize(
    ("filename", "message"),
    [
        # What the sandbox opens for itself (``/``), or an import on the way: not named.
        ("/", "opener failed: {words}"),
        ("/usr/lib/python3/site-packages/anyio/_backends/__init__.py", "opener failed: {words}"),
        # The model's own file, under the root or as it sent it, is named.
        (None, "Cannot open a.txt: {words}"),
        ("{root}/a.txt", "Cannot open a.txt: {words}"),
        ("a.txt", "Cannot open a.txt: {words}"),
    ],
)
def test_out_of_fds_says_so_and_names_only_the_models_file(
    tmp_path: Path, number: int, filename: str | None, message: str
) -> None:
    def fail(args: _PathArgs, context: Any) -> str:
        name = None if filename is None else filename.format(root=tmp_path)
        raise OSError(number, os.strerror(number), name)

    opener = tool(
        name="opener",
        description="fails",
        parameters=_PathArgs,
        execute=fail,
        workspace=Workspace(tmp_path),
    )
    result = invoke_tool_sync(opener, {"path": "a.txt"})
    assert (result.error_code, result.error) == (
        ErrorCode.TOOL_ERROR,
        message.format(words=OUT_OF_FDS_WORDS[number]),
    )


def test_arguments_that_are_not_text_are_invalid_arguments(tmp_path: Path) -> None:
    read_file = {t.name: t for t in workspace_tools(tmp_path)}["read_file"]
    result = invoke_tool_sync(read_file, b"\xff{}")
    assert (result.error_code, result.error) == (
        ErrorCode.INVALID_ARGUMENTS,
        "Invalid arguments for read_file: not valid JSON ('utf-8' codec can't decode byte "
        "0xff in position 0: invalid start byte)",
    )


class _BrokenPolicy(Policy):
    raised: str = "os"

    def decide(self, tool: Any, arguments: Any, workspace: Any = None) -> Any:
        if self.raised == "os":
            raise OSError(errno.EINVAL, "Invalid argument")
        raise RuntimeError("no rules file")


@pytest.mark.parametrize(
    ("raised", "code", "message"),
    [
        (
            "os",
            ErrorCode.INVALID_ARGUMENTS,
            "Not run: the policy could not decide on this read_file call: The file system "
            "refuses sw/a.txt as an invalid name; use another name",
        ),
        (
            "other",
            ErrorCode.PERMISSION_DENIED,
            "Not run: the policy could not decide on this read_file call: RuntimeError: no "
            "rules file",
        ),
    ],
)
def test_a_policy_check_that_raises_refuses_the_call(
    tmp_path: Path, raised: str, code: ErrorCode, message: str
) -> None:
    (tmp_path / "sw").mkdir()
    (tmp_path / "sw" / "a.txt").write_text("a\n")
    session = ToolSession(tmp_path, policy=_BrokenPolicy(raised=raised))
    result = session.call_sync("read_file", {"path": "sw/a.txt"})
    assert (result.error_code, result.error) == (code, message)
    assert result.details == {"skipped": True, "skip_reason": "policy", "denied_by": None}
    step = session.steps[0]
    assert (step.skipped, step.skip_reason, step.result) == (True, "policy", message)


def test_a_working_directory_removed_as_the_command_starts_is_not_found(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "sub").mkdir()
    opened = run_command._open_working_dir

    def open_then_remove(workspace: Workspace, path: str) -> tuple[str, int]:
        rel, fd = opened(workspace, path)
        os.rmdir(tmp_path / rel)
        return rel, fd

    monkeypatch.setattr(run_command, "_open_working_dir", open_then_remove)
    tool_ = {t.name: t for t in workspace_tools(tmp_path)}["run_command"]
    result = invoke_tool_sync(tool_, {"command": "echo ran", "cwd": "sub"})
    assert (result.error_code, result.error) == (
        ErrorCode.NOT_FOUND,
        "Working directory sub changed while the command was starting; check it and run the "
        "command again",
    )


@pytest.mark.parametrize(
    ("name", "arguments", "message"),
    [
        (
            "read_file",
            b"\xff",
            "Invalid arguments for read_file: not valid JSON ('utf-8' codec can't decode byte "
            "0xff in position 0: invalid start byte)",
        ),
        (
            "read_file",
            [1],
            "Invalid arguments for read_file: the arguments are an array, not an object of "
            "named arguments (the arguments are: path, offset, limit)",
        ),
        (
            123,
            {},
            "Unknown tool '123'; the tools are: apply_patch, edit_file, glob, grep, list_files, "
            "read_file, run_command, write_file",
        ),
    ],
)
def test_a_session_call_with_malformed_input_is_invalid_arguments(
    tmp_path: Path, name: Any, arguments: Any, message: str
) -> None:
    session = ToolSession(tmp_path)
    result = session.call_sync(name, arguments)
    assert (result.error_code, result.error) == (ErrorCode.INVALID_ARGUMENTS, message)
    assert [(s.tool, s.failed) for s in session.steps] == [(str(name), True)]
