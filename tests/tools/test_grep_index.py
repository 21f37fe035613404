"""grep's warm index: the same results as reading every file, whatever changed since it was
built; it narrows a search to the files that may hold the pattern's literal."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests._index_builds import index_build_server
from workspace_tools import invoke_tool_sync
from workspace_tools.search import _index
from workspace_tools.search._index import SearchIndex
from workspace_tools.tools import grep as grep_tool
from workspace_tools.workspace import Workspace

pytestmark = pytest.mark.skipif(
    not sys.platform.startswith("linux"), reason="the index hears of changes from inotify"
)

WORDS = ["foo", "foobar", "bar_baz", "x", "NEEDLE", "needle", "café", "Foo", "(", ")", "."]
PATTERNS = [
    ("foo", False),
    ("oba", False),
    ("bar_b", False),
    ("foo(", False),
    ("NEEDLE", False),
    ("EDL", False),
    (r"foo\w+", False),
    (r"ba[rz]_baz", False),
    ("(foo|bar)", False),
    ("needle", True),
    (r"caf\w", False),
    ("x foo", False),
]
NAMES = ["a.py", "b.txt", "sub/c.py", "sub/deep/d.md", "other/e.py"]

lines = st.lists(st.sampled_from(WORDS), max_size=6).map(" ".join)
texts = st.lists(lines, max_size=5).map("\n".join)
contents = st.one_of(
    texts.map(lambda t: t.encode()),
    texts.map(lambda t: t.replace("\n", "\r\n").encode()),
    texts.map(lambda t: b"\0binary " + t.encode()),
    texts.map(lambda t: t.encode("utf-16")),
    texts.map(lambda t: t.encode("latin-1", "replace")),
)
operations = st.lists(
    st.one_of(
        st.tuples(st.just("write"), st.sampled_from(NAMES), contents),
        st.tuples(st.just("replace"), st.sampled_from(NAMES), contents),
        st.tuples(st.just("append"), st.sampled_from(NAMES), contents),
        st.tuples(st.just("delete"), st.sampled_from(NAMES), st.just(b"")),
        st.tuples(st.just("move_dir"), st.sampled_from(["sub", "other"]), st.just(b"")),
        st.tuples(st.just("new_dir"), st.sampled_from(["new", "sub/new"]), contents),
    ),
    max_size=6,
)


def apply(root: Path, operation: tuple[str, str, bytes]) -> None:
    kind, name, data = operation
    path = root / name
    if kind == "move_dir":
        if path.is_dir():
            target = root / f"{name}-moved"
            if target.exists():
                shutil.rmtree(target)
            path.rename(target)
            # The old name comes back with other files (a checkout of another branch).
            (path / "deep").mkdir(parents=True)
            (path / "c.py").write_bytes(b"foo NEEDLE\n")
        return
    if kind == "new_dir":
        path.mkdir(parents=True, exist_ok=True)
        (path / "f.py").write_bytes(data)
        return
    if kind == "delete":
        path.unlink(missing_ok=True)
        return
    path.parent.mkdir(parents=True, exist_ok=True)
    if kind == "replace":
        temp = path.with_name(path.name + ".new")
        temp.write_bytes(data)
        temp.rename(path)
    elif kind == "append":
        with open(path, "ab") as handle:
            handle.write(data)
    else:  # in place: the directory's stat does not change
        with open(path, "r+b" if path.exists() else "wb") as handle:
            handle.truncate(0)
            handle.write(data)


def make_tree(root: Path, initial: dict[str, bytes]) -> None:
    for name, data in initial.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_bytes(data)


def results(tool, pattern: str, ignore_case: bool, scope: dict) -> tuple[str, dict]:  # type: ignore[no-untyped-def]
    arguments = {"pattern": pattern, "ignore_case": ignore_case, "limit": 3, **scope}
    result = invoke_tool_sync(tool, arguments)
    details = result.details.model_dump() if result.details is not None else None
    return result.model_text(), details


@pytest.fixture(scope="module")
def one_build_server() -> Iterator[Callable[..., Any]]:
    """``_index._in_child`` on one spawn server for the whole module: each build still runs
    in a child of a clean interpreter, with the same limits and no environment, but the
    server (most of a build's cost) starts once, not once per example. ``_in_child``'s own
    server is what the tests on ``indexed_tree`` below use."""
    with index_build_server() as in_child:
        yield in_child


@settings(
    max_examples=40,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(
    initial=st.dictionaries(st.sampled_from(NAMES), contents, min_size=1),
    changes=operations,
    scope=st.fixed_dictionaries(
        {},
        optional={
            "output_mode": st.sampled_from(["content", "count", "files_with_matches"]),
            "path": st.sampled_from([".", "sub"]),
            "glob": st.sampled_from(["*.py", "sub/**"]),
            "include_ignored": st.booleans(),
        },
    ),
)
def test_indexed_search_matches_reading_every_file(
    one_build_server: Callable[..., Any],
    monkeypatch: pytest.MonkeyPatch,
    initial: dict[str, bytes],
    changes: list[tuple[str, str, bytes]],
    scope: dict,
) -> None:
    monkeypatch.setattr(_index, "_in_child", one_build_server)
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        make_tree(root, {**initial, ".gitignore": b"other/\n"})
        workspace = Workspace(root)
        index = SearchIndex(str(workspace.root), min_files=1)
        indexed = grep_tool.build(workspace, index=index)
        plain_index = SearchIndex(str(workspace.root), min_files=1)
        plain_index.close()  # never builds
        plain = grep_tool.build(Workspace(root), index=plain_index)
        try:
            invoke_tool_sync(indexed, {"pattern": "foo"})
            assert index.wait(30), "the index was not built"
            for operation in [None, *changes]:
                if operation is not None:
                    apply(root, operation)
                for pattern, ignore_case in PATTERNS:
                    seen = results(indexed, pattern, ignore_case, scope)
                    expected = results(plain, pattern, ignore_case, scope)
                    assert seen == expected, (pattern, operation)
        finally:
            index.close()


@pytest.fixture
def indexed_tree(tmp_path: Path):  # type: ignore[no-untyped-def]
    make_tree(
        tmp_path,
        {
            "a.py": b"def foo():\n    return NEEDLE\n",
            "b.py": b"def bar():\n    pass\n",
            "c.bin": b"\0\0NEEDLE",
            "d/e.py": b"x = rarely_used_name\n",
        },
    )
    workspace = Workspace(tmp_path)
    index = SearchIndex(str(workspace.root), min_files=1)
    tool = grep_tool.build(workspace, index=index)
    invoke_tool_sync(tool, {"pattern": "foo"})
    assert index.wait(30)
    yield tmp_path, index, tool
    index.close()


def test_the_index_selects_only_files_holding_the_literal(indexed_tree) -> None:  # type: ignore[no-untyped-def]
    root, index, _ = indexed_tree
    files = ["a.py", "b.py", "c.bin", "d/e.py"]
    chosen = index.select(files, b"rarely_used")
    assert chosen is not None
    assert (chosen.files, chosen.skipped_text, chosen.skipped_binary) == (["d/e.py"], 2, 1)
    assert chosen.size == len(b"x = rarely_used_name\n")
    # A file written in place since the build is read again, whatever the index holds.
    (root / "b.py").write_bytes(b"y = rarely_used\n")
    chosen = index.select(files, b"rarely_used")
    assert chosen is not None
    assert (chosen.files, chosen.skipped_text) == (["b.py", "d/e.py"], 1)
    # Sizes as the build read them: b.py's old one.
    assert chosen.size == len(b"def bar():\n    pass\n") + len(b"x = rarely_used_name\n")
    assert index.memory > 0


def test_an_unknown_word_or_no_word_leaves_the_search_whole(indexed_tree) -> None:  # type: ignore[no-untyped-def]
    _, index, _ = indexed_tree
    files = ["a.py", "b.py", "c.bin", "d/e.py"]
    nothing = index.select(files, b"absent_everywhere")
    assert nothing is not None
    assert (nothing.files, nothing.skipped_text, nothing.skipped_binary) == ([], 3, 1)
    assert index.select(files, b"->") is None  # no word of three characters


def test_a_forked_copy_does_not_use_the_index(indexed_tree) -> None:  # type: ignore[no-untyped-def]
    # Its reads of the shared inotify queue would take events from the parent.
    _, index, _ = indexed_tree
    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.write(write_end, b"none" if index.select(["a.py"], b"NEEDLE") is None else b"used")
        os._exit(0)
    os.close(write_end)
    answer = os.read(read_end, 4)
    os.close(read_end)
    os.waitpid(pid, 0)
    assert answer == b"none"


def test_grep_results_after_changes_equal_a_fresh_search(indexed_tree) -> None:  # type: ignore[no-untyped-def]
    root, _, tool = indexed_tree
    (root / "d" / "new.py").write_text("NEEDLE again\n")
    (root / "a.py").write_text("nothing here\n")
    result = invoke_tool_sync(tool, {"pattern": "NEEDLE"})
    assert result.model_text() == "d/new.py:1:NEEDLE again"
    assert (result.details.files_searched, result.details.binary_skipped) == (4, 1)


def test_a_directory_swapped_for_another_is_read_again(indexed_tree) -> None:  # type: ignore[no-untyped-def]
    # The new d/ is not watched: its e.py, known to the index by name, must be read.
    root, _, tool = indexed_tree
    (root / "d").rename(root / "d-old")
    (root / "d").mkdir()
    (root / "d" / "e.py").write_text("NEEDLE in the new d\n")
    (root / "d" / "e.py").write_text("NEEDLE in the new d, rewritten\n")
    result = invoke_tool_sync(tool, {"pattern": "NEEDLE"})
    assert result.model_text() == (
        "a.py:2:    return NEEDLE\nd/e.py:1:NEEDLE in the new d, rewritten"
    )


def test_a_tree_with_too_many_words_gets_no_index(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(_index, "MAX_POSTINGS", 3)
    make_tree(tmp_path, {"a.py": b"one two three four\n", "b.py": b"NEEDLE\n"})
    workspace = Workspace(tmp_path)
    index = SearchIndex(str(workspace.root), min_files=1)
    tool = grep_tool.build(workspace, index=index)
    invoke_tool_sync(tool, {"pattern": "NEEDLE"})
    assert index.wait(30) is False
    result = invoke_tool_sync(tool, {"pattern": "NEEDLE"})
    assert result.model_text() == "b.py:1:NEEDLE"


def test_an_index_whose_candidates_are_most_files_leaves_the_search_whole(
    tmp_path: Path,
) -> None:
    # A word every file holds, or files rewritten since the build: leaving out fewer than
    # a sixteenth of the files saves too little, so the index steps aside.
    names = [f"f{i:02d}.py" for i in range(40)]
    make_tree(tmp_path, {name: b"value = 1\n" for name in names})
    workspace = Workspace(tmp_path)
    index = SearchIndex(str(workspace.root), min_files=1)
    try:
        invoke_tool_sync(grep_tool.build(workspace, index=index), {"pattern": "x"})
        assert index.wait(30)
        assert index.select(names, b"value") is None
        chosen = index.select(names, b"rarely_used")
        assert chosen is not None
        assert (chosen.files, chosen.skipped_text) == ([], 40)
        for name in names[:37]:
            (tmp_path / name).write_bytes(b"y = rarely_used\n")
        chosen = index.select(names, b"rarely_used")
        assert chosen is not None
        assert (chosen.files, chosen.skipped_text) == (names[:37], 3)
        (tmp_path / names[37]).write_bytes(b"z = 2\n")
        assert index.select(names, b"rarely_used") is None
    finally:
        index.close()


def test_the_files_of_the_last_words_are_kept_within_their_budget(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Each word's files are found once and kept for the next searches; the oldest words
    # go past KEPT_WORDS, or past KEPT_IDS_PER_FILE ids a file in all.
    names = [f"f{i}.py" for i in range(8)]
    make_tree(
        tmp_path,
        {name: f"common word{i} pair{i // 2}\n".encode() for i, name in enumerate(names)},
    )
    workspace = Workspace(tmp_path)
    index = SearchIndex(str(workspace.root), min_files=1)
    try:
        invoke_tool_sync(grep_tool.build(workspace, index=index), {"pattern": "x"})
        assert index.wait(30)
        built = index._built
        assert built is not None
        found: list[bytes] = []
        holders = _index._holders
        monkeypatch.setattr(_index, "_holders", lambda b, w: found.append(w) or holders(b, w))
        monkeypatch.setattr(_index, "KEPT_WORDS", 3)
        for word in (b"word1", b"word2", b"word1", b"word3", b"word4"):
            chosen = index.select(names, word)
            assert chosen is not None
            assert chosen.files == [f"f{word[-1] - ord('0')}.py"], word
        assert found == [b"word1", b"word2", b"word3", b"word4"]  # word1 found once
        assert list(built.holders) == [b"word1", b"word3", b"word4"]  # word2 the oldest
        assert index.select(names, b"common") is None  # in every file: steps aside
        assert list(built.holders) == [b"word3", b"word4", b"common"]
        monkeypatch.setattr(_index, "KEPT_WORDS", 64)
        monkeypatch.setattr(_index, "KEPT_IDS_PER_FILE", 1)  # 8 ids in all
        for word in (b"pair0", b"pair1", b"pair2", b"pair3", b"word5"):
            chosen = index.select(names, word)
            assert chosen is not None and len(chosen.files) == 1 + word.startswith(b"pair")
        # 2 ids a pair and 1 for word5 (the newest), 8 at most: pair0 and the older went.
        assert list(built.holders) == [b"pair1", b"pair2", b"pair3", b"word5"]
    finally:
        index.close()


def _opened_names(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The names the search opens from now on (relative to their directory's fd)."""
    opened: list[str] = []
    real_open = os.open

    def spy(path: Any, flags: int, mode: int = 0o777, *, dir_fd: int | None = None) -> int:
        opened.append(os.fsdecode(path))
        return real_open(path, flags, mode, dir_fd=dir_fd)

    monkeypatch.setattr(os, "open", spy)
    return opened


def test_a_repeated_search_uses_the_kept_bytes_until_the_file_changes(
    indexed_tree, monkeypatch: pytest.MonkeyPatch
) -> None:  # type: ignore[no-untyped-def]
    root, index, tool = indexed_tree
    first = invoke_tool_sync(tool, {"pattern": "NEEDLE"})
    assert first.model_text() == "a.py:2:    return NEEDLE"
    kept = index._built.kept
    assert kept.get("a.py") == b"def foo():\n    return NEEDLE\n"
    assert kept.get("c.bin") is None  # binary: never kept
    assert index.memory >= kept.size == len(b"def foo():\n    return NEEDLE\n")
    opened = _opened_names(monkeypatch)
    again = invoke_tool_sync(tool, {"pattern": "NEEDLE"})
    assert again.model_text() == first.model_text()
    assert "a.py" not in opened
    # Rewritten in place to the same size: the drain drops its bytes, it is read again.
    (root / "a.py").write_bytes(b"def foo():\n    return NEEDLY\n")
    assert invoke_tool_sync(tool, {"pattern": "NEEDLE"}).model_text() == "No matches"
    assert "a.py" in opened
    assert kept.get("a.py") is None  # changed since the build: never kept again
    assert invoke_tool_sync(tool, {"pattern": "NEEDLY"}).model_text() == "a.py:2:    return NEEDLY"


def test_kept_bytes_stay_within_their_budget(indexed_tree, monkeypatch: pytest.MonkeyPatch) -> None:  # type: ignore[no-untyped-def]
    _, index, tool = indexed_tree
    monkeypatch.setattr(_index, "KEPT_FILE_BYTES", 10)
    invoke_tool_sync(tool, {"pattern": "NEEDLE"})
    assert index._built.kept.get("a.py") is None  # 29 bytes: too big to keep
    monkeypatch.setattr(_index, "KEPT_FILE_BYTES", 1 << 20)
    monkeypatch.setattr(_index, "KEPT_BYTES", 30)
    invoke_tool_sync(tool, {"pattern": "rarely_used_name"})
    invoke_tool_sync(tool, {"pattern": "NEEDLE"})
    kept = index._built.kept
    # d/e.py (21 bytes) came first; a.py (29) would pass the 30 in all.
    assert (kept.get("d/e.py"), kept.get("a.py"), kept.size) == (
        b"x = rarely_used_name\n",
        None,
        21,
    )


# A program that greps once, leaves the index's build matching with RE2 (which lets go of
# the GIL while it matches, as the walk's ignore rules do), and returns.
_EXIT_DURING_BUILD = r"""
import sys, threading, time
import re2
from workspace_tools import invoke_tool_sync, workspace_tools
from workspace_tools.search import _index
from workspace_tools.search._index import SearchIndex
from workspace_tools.tools.grep import INDEX_KEY
from workspace_tools.workspace import Workspace

building = threading.Event()
real_build = _index._build

def matching_build(*args):
    building.set()
    pattern, text = re2.compile("(a|b)*c"), "ab" * 200_000
    until = time.monotonic() + 1.5
    while time.monotonic() < until:
        pattern.search(text)
    return real_build(*args)

_index._build = matching_build
workspace = Workspace(sys.argv[1])
workspace.keep(INDEX_KEY, SearchIndex(str(workspace.root), min_files=1))
grep = {t.name: t for t in workspace_tools(workspace)}["grep"]
print(invoke_tool_sync(grep, {"pattern": "word"}).details.match_count)
assert building.wait(60), "no build started"
"""


def test_the_interpreters_exit_during_a_build_waits_for_it(tmp_path: Path) -> None:
    # A daemon thread inside C++ code at the interpreter's finalization is ended by
    # pthread_exit, whose unwinding through the C++ frames aborts the process.
    for n in range(3):
        (tmp_path / f"f{n}.txt").write_text(f"word {n}\n")
    script = tmp_path.parent / "exit_during_build.py"
    script.write_text(_EXIT_DURING_BUILD)
    done = subprocess.run(
        [sys.executable, str(script), str(tmp_path)], capture_output=True, text=True, timeout=120
    )
    assert (done.returncode, done.stdout, done.stderr) == (0, "3\n", "")
