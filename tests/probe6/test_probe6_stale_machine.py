"""Nothing stale is ever returned: one long-lived set of tools (walk cache, ignore-file
cache, line indexes, grep's warm index) and a ToolSession over them (result cache) answer
every call exactly as tools made afresh for that call do, and as git, ripgrep and the
file's bytes say, whatever changed in between: same-size rewrites with the old mtime put
back (``cp -p``, ``touch -d``), rename swaps, delete and recreate (inode reuse), a file
turning into a directory or a symlink and back, a symlinked directory retargeted, ignore
files and the git index changed, modes changed, and the same changes made by a shell
command through run_command.

The caches' racy-clean windows (a change within the file-system clock's tick) are
set aside here ("the clock has moved on"): otherwise nothing written a moment ago is
cached at all; and every file read gets a line index, however small. What is exercised
is that every key holds enough to see every change.

``PROBE6_EXAMPLES`` / ``PROBE6_STEPS`` search harder (with ``--hypothesis-profile=explore``
for new sequences each run)."""

from __future__ import annotations

import contextlib
import functools
import os
import shlex
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    initialize,
    rule,
    run_state_machine_as_test,
)

from sandbox import Sandbox
from tests._index_builds import index_build_server
from tests.probe6 import _tree
from tests.probe6._tree import DIRS, IGNORE_FILES, NAMES, OLD_NS, RULES, WORDS
from workspace_tools import ToolSession, invoke_tool_sync, workspace_tools
from workspace_tools.search import _index
from workspace_tools.search._index import SearchIndex
from workspace_tools.tools import read_file
from workspace_tools.tools.grep import INDEX_KEY
from workspace_tools.workspace import Workspace, _fingerprint, _line_index, _walk

pytestmark = pytest.mark.skipif(
    not sys.platform.startswith("linux"), reason="the warm index hears of changes from inotify"
)

OPTIONS: dict[str, Any] = {"max_file_bytes": 4096}
EXAMPLES = int(os.environ.get("PROBE6_EXAMPLES", "12"))
STEPS = int(os.environ.get("PROBE6_STEPS", "25"))

names = st.sampled_from(NAMES)
any_path = st.sampled_from([*NAMES, *DIRS, "link", "flink", "link/c.py", "."])
contents = st.lists(st.sampled_from(WORDS), min_size=1, max_size=8).map(
    lambda ws: (" ".join(ws) + "\n").encode()
)
#: Where a hard link is made: directories no rule of the machine ignores, or a new one.
LINK_NAMES = ["a.txt", "b.txt", "x.tmp", "big.log", "sub/c.py", "sub/d.py", "new/linked.txt"]
GREP_PATTERNS = [
    ("NEEDLE", False),
    ("needle", False),
    ("delta_x", False),
    ("foo()", False),
    (r"foo\(\)", True),
    (r"gam+a", True),
    (r"row \d+ x{12}", True),
    ("alt NEEDLE", False),
]


def outcome(result: Any) -> tuple[Any, ...]:
    details = result.details.model_dump() if result.details is not None else None
    return (result.is_error, result.error_code, result.model_text(), details)


REPLAYED = 3


def _change(method: Callable[..., None]) -> Callable[..., None]:
    """A change to the tree, then the last calls replayed (:meth:`StaleCaches.replay`)."""

    @functools.wraps(method)
    def changed(self: StaleCaches, **kwargs: Any) -> None:
        # A file the machine made unreadable (a run without CAP_DAC_OVERRIDE) stays as is.
        with contextlib.suppress(PermissionError):
            method(self, **kwargs)
        self.replay()

    return changed


class StaleCaches(RuleBasedStateMachine):
    """One workspace, changed and called in turn; every answer checked against a fresh
    set of tools and the outside oracles."""

    tmp: Path
    in_child: Callable[..., Any]
    sandbox: Sandbox | None = None

    def __init__(self) -> None:
        super().__init__()
        self.root = self.tmp / f"ws{time.monotonic_ns()}"
        self.home = self.tmp / f"xdg{time.monotonic_ns()}"
        self.root.mkdir()
        os.environ["XDG_CONFIG_HOME"] = str(self.home)
        _tree.initial_tree(self.root, self.home)
        self.workspace = Workspace(self.root, **OPTIONS)
        self.index = SearchIndex(str(self.workspace.root), min_files=1)
        self.workspace.keep(INDEX_KEY, self.index)
        if self.sandbox is not None:
            self.tools = {t.name: t for t in workspace_tools(self.workspace, sandbox=self.sandbox)}
        else:
            self.tools = {t.name: t for t in workspace_tools(self.workspace)}
        self.session = ToolSession(list(self.tools.values()))
        self.tracked = False
        self.history: list[tuple[str, dict[str, Any]]] = []

    # -- calls -------------------------------------------------------------------------

    def check(self, name: str, args: dict[str, Any]) -> tuple[Any, ...]:
        direct = outcome(invoke_tool_sync(self.tools[name], args))
        via_session = outcome(self.session.call_sync(name, args))
        fresh_tools = {t.name: t for t in workspace_tools(self.root, **OPTIONS)}
        fresh = outcome(invoke_tool_sync(fresh_tools[name], args))
        self.history.append((name, args))
        assert direct == fresh, f"{name}({args}) long-lived tools:\n{direct}\nfresh:\n{fresh}"
        assert via_session == fresh, f"{name}({args}) session:\n{via_session}\nfresh:\n{fresh}"
        return fresh

    @initialize()
    def warm_index(self) -> None:
        self.check("grep", {"pattern": "NEEDLE"})
        if self.sandbox is None:  # a sandboxed grep runs in the worker's copy
            assert self.index.wait(60), "the warm index was not built"

    @rule(
        path=any_path,
        offset=st.sampled_from([1, 2, 40, 700, 1400]),
        limit=st.sampled_from([1, 3, 2000]),
    )
    def read(self, path: str, offset: int, limit: int) -> None:
        fresh = self.check("read_file", {"path": path, "offset": offset, "limit": limit})
        target = self.root / path
        if offset == 1 and limit == 2000 and _tree.kind(target) == "file" and not fresh[0]:
            expected = _tree.expected_read(target.read_bytes())
            if expected is not None:
                assert fresh[2] == expected, (path, fresh[2], expected)

    @rule(offset=st.sampled_from([1, 2, 97, 700, 1400, 1499]), limit=st.sampled_from([1, 5]))
    def read_big(self, offset: int, limit: int) -> None:
        self.check("read_file", {"path": "big.log", "offset": offset, "limit": limit})

    @rule(which=st.integers(0, 1 << 16))
    def again(self, which: int) -> None:
        """A call made before, made again: what the caches are for."""
        if self.history:
            name, args = self.history[-1 - which % min(len(self.history), 6)]
            self.check(name, args)

    @rule(
        pattern=st.sampled_from(GREP_PATTERNS),
        path=st.sampled_from([".", "sub", "other", "link", "a.txt"]),
        glob=st.sampled_from([None, "*.py", "*.txt", "sub/**"]),
        mode=st.sampled_from(["files_with_matches", "content", "count"]),
    )
    def grep(self, pattern: tuple[str, bool], path: str, glob: str | None, mode: str) -> None:
        args: dict[str, Any] = {"pattern": pattern[0], "path": path, "output_mode": mode}
        if glob is not None:
            args["glob"] = glob
        if not pattern[1]:
            args["pattern"] = _escape(pattern[0])
        fresh = self.check("grep", args)
        if mode == "files_with_matches" and glob is None and path == "." and not fresh[0]:
            found = _tree.rg_files(self.root, pattern[0], not pattern[1], ".")
            ours = {f["path"] for f in fresh[3]["files"]}
            if found is not None and not self.tracked:
                assert ours == found, f"grep {args}: ours {sorted(ours)}, rg {sorted(found)}"

    @rule(
        pattern=st.sampled_from(["**/*.py", "*", "**/*", "sub/**", "**/*.md", "*.txt"]),
        path=st.sampled_from([".", "sub", "link"]),
    )
    def glob(self, pattern: str, path: str) -> None:
        self.check("glob", {"pattern": pattern, "path": path})

    @rule(
        path=st.sampled_from([".", "sub", "other", "link", "alt"]),
        recursive=st.booleans(),
        include_ignored=st.booleans(),
    )
    def list_files(self, path: str, recursive: bool, include_ignored: bool) -> None:
        args = {"path": path, "recursive": recursive, "include_ignored": include_ignored}
        fresh = self.check("list_files", args)
        # git reads no .ignore file (ripgrep's, which the walk applies too).
        git_rules_only = not any(self.root.rglob(".ignore"))
        if path == "." and recursive and not include_ignored and not fresh[0] and git_rules_only:
            ours = {e["path"] for e in fresh[3]["entries"] if e["type"] != "directory"}
            assert ours == _tree.git_listed(self.root), "list_files against git ls-files"

    def replay(self) -> None:
        """After a change, the last few distinct calls again: each was answered (and
        cached) before the change, so a stale cache shows here."""
        seen: list[tuple[str, dict[str, Any]]] = []
        for call in reversed(self.history):
            if call not in seen:
                seen.append(call)
            if len(seen) == REPLAYED:
                break
        for name, args in reversed(seen):
            self.check(name, args)

    # -- changes in Python (each followed by a replay) ----------------------------------

    @rule(
        rel=names,
        data=contents,
        how=st.sampled_from(["inplace", "atomic", "recreate", "same_size_old_mtime", "append"]),
    )
    @_change
    def write(self, rel: str, data: bytes, how: str) -> None:
        if not _tree.parent_is_dir(self.root, rel):
            return
        path = self.root / rel
        if rel == "big.log":
            data = _tree.big_text(len(data) % 50)
        if _tree.kind(path) != "file":
            _tree.remove(path)
            path.write_bytes(data)
            return
        before = path.stat()
        if how == "inplace":
            with open(path, "r+b") as handle:
                handle.truncate(0)
                handle.write(data)
        elif how == "append":
            with open(path, "ab") as handle:
                handle.write(data)
        elif how == "atomic":
            temp = path.with_name(path.name + ".new")
            temp.write_bytes(data)
            temp.rename(path)
        elif how == "recreate":
            path.unlink()
            path.write_bytes(data)
        else:
            new = _tree.same_size(path.read_bytes(), data)
            with open(path, "r+b") as handle:
                handle.write(new)
            os.utime(path, ns=(before.st_atime_ns, before.st_mtime_ns))

    @rule(a=names, b=names, restore_dirs=st.booleans())
    @_change
    def swap(self, a: str, b: str, restore_dirs: bool) -> None:
        pa, pb = self.root / a, self.root / b
        if a == b or _tree.kind(pa) == "none" or _tree.kind(pb) == "none":
            return
        if not (_tree.parent_is_dir(self.root, a) and _tree.parent_is_dir(self.root, b)):
            return
        if pa in pb.parents or pb in pa.parents:
            return
        dirs = {pa.parent, pb.parent}
        stamps = {d: d.stat() for d in dirs}
        temp = pa.with_name(pa.name + ".swap")
        pa.rename(temp)
        pb.rename(pa)
        temp.rename(pb)
        if restore_dirs:
            for d, st_ in stamps.items():
                os.utime(d, ns=(st_.st_atime_ns, st_.st_mtime_ns))

    @rule(rel=names)
    @_change
    def delete(self, rel: str) -> None:
        _tree.remove(self.root / rel)

    @rule(rel=names, data=contents)
    @_change
    def to_directory(self, rel: str, data: bytes) -> None:
        if not _tree.parent_is_dir(self.root, rel):
            return
        path = self.root / rel
        _tree.remove(path)
        path.mkdir()
        (path / "inner.py").write_bytes(data)

    @rule(
        rel=st.sampled_from([*NAMES, "link", "flink"]),
        to=st.sampled_from(["a.txt", "sub", "alt", "other", "missing", "../.."]),
        atomic=st.booleans(),
    )
    @_change
    def to_symlink(self, rel: str, to: str, atomic: bool) -> None:
        if not _tree.parent_is_dir(self.root, rel):
            return
        path = self.root / rel
        if atomic and _tree.kind(path) != "dir":
            temp = path.with_name(path.name + ".lnk")
            _tree.remove(temp)
            temp.symlink_to(to)
            temp.rename(path)
        else:
            _tree.remove(path)
            path.symlink_to(to)

    @rule(src=names, dst=st.sampled_from(LINK_NAMES), data=contents)
    @_change
    def hard_link(self, src: str, dst: str, data: bytes) -> None:
        """Another name for a file (``ln``, ``cp -l``), then a write through it: in a
        directory the warm index watches (one no rule here ignores, or a new one). A link
        into an ignored directory, which it does not watch, is as one from outside the
        tree: a documented limit of inotify (README, "Warm index")."""
        ps, pd = self.root / src, self.root / dst
        if src == dst or _tree.kind(ps) != "file" or not _tree.parent_is_dir(self.root, src):
            return
        if dst.startswith("new/"):
            _tree.remove(pd.parent)
            pd.parent.mkdir()
        elif not _tree.parent_is_dir(self.root, dst):
            return
        _tree.remove(pd)
        os.link(ps, pd)
        with open(pd, "ab") as handle:
            handle.write(data)

    @rule(
        src=st.sampled_from(["sub", "other", "alt"]),
        dst=st.sampled_from(["sub", "other", "alt", "moved"]),
    )
    @_change
    def move_dir(self, src: str, dst: str) -> None:
        ps, pd = self.root / src, self.root / dst
        if src == dst or _tree.kind(ps) != "dir":
            return
        _tree.remove(pd)
        ps.rename(pd)

    @rule(
        which=st.sampled_from(IGNORE_FILES),
        rules=st.lists(st.sampled_from(RULES), max_size=3),
        same_size=st.booleans(),
    )
    @_change
    def ignore(self, which: str, rules: list[str], same_size: bool) -> None:
        path = _tree.ignore_path(self.root, self.home, which)
        if not _tree.parent_is_dir(path.parent.parent, path.parent.name + "/x"):
            return
        if not path.parent.is_dir() or _tree.kind(path) == "dir":
            return
        data = "".join(r + "\n" for r in rules).encode()
        if same_size and _tree.kind(path) == "file":
            before = path.stat()
            old = path.read_bytes()
            data = _tree.same_size(old, data) if old else data
            with open(path, "r+b") as handle:
                handle.truncate(0)
                handle.write(data)
            os.utime(path, ns=(before.st_atime_ns, before.st_mtime_ns))
        else:
            _tree.remove(path)
            path.write_bytes(data)

    @rule(rel=names, add=st.booleans())
    @_change
    def git_index(self, rel: str, add: bool) -> None:
        if _tree.kind(self.root / rel) not in ("file", "link") or not _tree.parent_is_dir(
            self.root, rel
        ):
            return
        try:
            if add:
                _tree.git(self.root, "add", "-f", "--", rel)
                self.tracked = True
            else:
                _tree.git(self.root, "rm", "-q", "--cached", "--ignore-unmatch", "--", rel)
        except Exception:
            return

    @rule(rel=st.sampled_from([*NAMES, *DIRS]), mode=st.sampled_from([0o000, 0o644, 0o755, 0o311]))
    @_change
    def chmod(self, rel: str, mode: int) -> None:
        path = self.root / rel
        if _tree.kind(path) in ("file", "dir"):
            os.chmod(path, mode | (0o700 if _tree.kind(path) == "dir" else 0))

    @rule(rel=st.sampled_from([*NAMES, *DIRS, "."]))
    @_change
    def touch_old(self, rel: str) -> None:
        path = self.root / rel
        if _tree.kind(path) in ("file", "dir"):
            os.utime(path, ns=(OLD_NS, OLD_NS))

    # -- the same changes by a command (run_command, bypassing the session) -------------

    @rule(
        script=st.sampled_from(
            [
                "cp -p {a} {a}.bak && printf 'zeta NEEDLE\\n' > {a}.bak"
                " && touch -r {a} {a}.bak && mv {a}.bak {a}",
                "cp -p {b} {a}",
                "mv {a} {a}.t && mv {b} {a} && mv {a}.t {b}",
                "touch -d '2020-01-01 00:00' {a}",
                "sed -i 's/a/e/' {a} && touch -d '2020-01-01' {a}",
                "cp -p {a} {a}.c && sed 's/e/a/' {a}.c > {a} && touch -r {a}.c {a} && rm {a}.c",
                "rm -rf {a} && mkdir -p {a} && echo NEEDLE > {a}/x.py",
                "ln -sfn alt {a}",
                "ln -sfn sub link",
                "ln {a} {a}.ln && echo 'zeta NEEDLE' >> {a}.ln",
                "echo '{b}' > .gitignore",
                "printf 'sub/\\n' > .git/info/exclude && touch -d '2020-01-01' .git/info/exclude",
            ]
        ),
        a=names,
        b=names,
        via_session=st.booleans(),
    )
    @_change
    def command(self, script: str, a: str, b: str, via_session: bool) -> None:
        line = script.format(a=shlex.quote(a), b=shlex.quote(b))
        args = {"command": line + " 2>/dev/null; true"}
        if via_session:
            result = self.session.call_sync("run_command", args)
        else:
            result = invoke_tool_sync(self.tools["run_command"], args)
        assert not result.is_error, result.model_text()

    def teardown(self) -> None:
        self.index.wait(60)  # a build under way ends before its server is closed
        self.session.close()
        self.workspace.close()
        for path in self.root.rglob("*"):
            if not path.is_symlink():
                os.chmod(path, 0o755)


def _escape(literal: str) -> str:
    return "".join("\\" + c if c in "()[]{}.*+?^$|\\" else c for c in literal)


@pytest.fixture
def clock_moved_on_everywhere(monkeypatch: pytest.MonkeyPatch) -> None:
    """The caches judge every stamp as settled (the file-system clock moved on since);
    ``PROBE6_REAL_CLOCK=1`` keeps their real windows (to search on a file system with a
    coarse clock, ``PROBE6_TMP`` on a ramfs)."""
    if os.environ.get("PROBE6_REAL_CLOCK"):
        return
    ahead = 10 * _fingerprint.RACY_NS
    monkeypatch.setattr(_fingerprint, "time_ns", lambda: time.time_ns() + ahead)
    monkeypatch.setattr(_walk, "_RACY_NS", -ahead)
    monkeypatch.setattr(_line_index, "RACY_NS", -ahead)
    # Every file read is indexed, however small: later windows of a file read whole come
    # from its index while the content its read recorded stands.
    monkeypatch.setattr(read_file, "MIN_INDEXED_BYTES", 1)


@pytest.fixture
def one_build_server(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """The index's builds on one spawn server (each still in a child of a clean
    interpreter): most of a build's cost is starting the server."""
    with index_build_server() as in_child:
        monkeypatch.setattr(_index, "_in_child", in_child)
        yield


def test_no_cache_answers_stale(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    clock_moved_on_everywhere: None,
    one_build_server: None,
) -> None:
    if os.environ.get("PROBE6_TMP"):
        tmp_path = Path(os.environ["PROBE6_TMP"])
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.setenv("GIT_CONFIG_NOSYSTEM", "1")
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "xdg"))
    StaleCaches.tmp = tmp_path
    run_state_machine_as_test(
        StaleCaches,
        settings=settings(
            max_examples=EXAMPLES,
            stateful_step_count=STEPS,
            deadline=None,
            suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
        ),
    )


@pytest.fixture(scope="module")
def box() -> Iterator[Sandbox]:
    sandbox = Sandbox()
    try:
        yield sandbox
    finally:
        sandbox.close()


def test_no_sandboxed_cache_answers_stale(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    clock_moved_on_everywhere: None,
    one_build_server: None,
    box: Sandbox,
) -> None:
    """The same with the tools bound to a sandbox: their calls run in the warm worker's
    reused child, whose copy of the workspace keeps a walk cache and line indexes of its
    own (with the caches' real windows: the child imports the modules afresh)."""
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.setenv("GIT_CONFIG_NOSYSTEM", "1")
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "xdg"))
    StaleCaches.tmp = tmp_path
    monkeypatch.setattr(StaleCaches, "sandbox", box)
    run_state_machine_as_test(
        StaleCaches,
        settings=settings(
            max_examples=max(EXAMPLES // 4, 1),
            stateful_step_count=STEPS,
            deadline=None,
            suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
        ),
    )
