"""A tree whose directories waiting to be walked outnumber the fds the process may open:
every walk and every recursive operation over it (list_files, glob, grep, a checkpoint and
its restore, the search index's read of the tree) is exact and complete, checked against
``find`` and ``git ls-files``.

The tools run in a child process whose ``RLIMIT_NOFILE`` is lowered (the test process keeps
its own). The tree is a spine ``s/s/s/...`` with, at every level, side directories that
are still waiting when the walk goes down the spine: a walker that held one fd a waiting
level would need one fd a level, more than the child may hold.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

DEPTH = 150
FD_LIMIT = 64  # fewer than DEPTH: one fd a waiting level is more than the child may hold

# Runs in the child: argv[1] the root, argv[2] the fd limit. Prints one JSON object.
_CHILD = r"""
import json, os, resource, sys
root, limit = sys.argv[1], int(sys.argv[2])
_, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
resource.setrlimit(resource.RLIMIT_NOFILE, (limit, hard))

from workspace_tools import Workspace, invoke_tool_sync, workspace_tools
from workspace_tools.search._index import _read_tree
from workspace_tools.session._checkpoints import Checkpoints

workspace = Workspace(root, fsync=False)
tools = {t.name: t for t in workspace_tools(workspace)}

def call(name, **arguments):
    result = invoke_tool_sync(tools[name], arguments)
    assert result.error is None, (name, result.error)
    return result.details

out = {}
listed = call("list_files", recursive=True, include_ignored=True, limit=100_000)
out["list_all"] = [[e.path, e.type] for e in listed.entries]
out["list_count"] = listed.count
out["glob"] = call("glob", pattern="**/*", limit=100_000).matches
grep = call("grep", pattern="needle", output_mode="files_with_matches", limit=100_000)
out["grep_files"] = [f.path for f in grep.files]
out["grep_total"] = grep.match_count
walk = workspace.walker.walk(root, "", recursive=True, include_ignored=True)
files = walk.files
read = _read_tree(root, files, {os.path.dirname(f) for f in files} | {""}, 10**9)
out["index_read"] = sorted(files[p] for p in read[0])

checkpoints = Checkpoints(workspace)
try:
    checkpoints.before()
    deepest = "s/" * DEEPEST
    changed = call("write_file", path=deepest + "b/leaf.txt", content="changed\n")
    added = call("write_file", path=deepest + "new/dir/new.txt", content="new\n")
    # One patch over every level: a file changed and one added in each of its directories.
    levels = range(DEEPEST + 1)
    patch = "*** Begin Patch\n"
    update = "*** Update File: {}f.txt\n@@\n-needle {}\n+patched {}\n"
    patch += "".join(update.format("s/" * i, i, i) for i in levels)
    patch += "".join(f"*** Add File: {'s/' * i}a/new.txt\n+new {i}\n" for i in levels)
    patch += "*** End Patch\n"
    call("apply_patch", patch=patch)
    patched = call("grep", pattern="^(patched|new) [0-9]+$", output_mode="count", limit=100_000)
    out["patched"] = patched.match_count
    checkpoints.after(0)
    restored = checkpoints.restore(0)
    out["restore"] = [bool(restored.applied), restored.conflicts, restored.not_restorable]
finally:
    checkpoints.close()
print(json.dumps(out))
""".replace("DEEPEST", str(DEPTH - 1))


def _make_tree(root: Path) -> None:
    """The spine, with at each level: side directories ``a`` and ``b`` (``b`` with a file
    and a subdirectory), a file naming the level, a symlink to ``a`` (listed, never
    followed), and every tenth level an ignore file with an ignored file."""
    level = root
    for index in range(DEPTH):
        (level / "a").mkdir()
        (level / "b" / "c").mkdir(parents=True)
        (level / "b" / "leaf.txt").write_text("needle in b\n")
        (level / "b" / "c" / "deep.txt").write_text("nothing\n")
        (level / "f.txt").write_text(f"needle {index}\n")
        (level / "link").symlink_to("a")
        if index % 10 == 0:
            (level / ".gitignore").write_text("*.log\n")
            (level / "x.log").write_text("needle ignored\n")
        level = level / "s"
        level.mkdir()


def _find(root: Path) -> list[list[str]]:
    """Every entry below ``root`` but ``.git``, with its type, in path order."""
    lines = subprocess.run(
        ["find", ".", "-mindepth", "1", "-path", "./.git", "-prune", "-o", "-printf", "%P\t%y\n"],
        cwd=root,
        check=True,
        capture_output=True,
        text=True,
    ).stdout.splitlines()
    kinds = {"d": "directory", "f": "file", "l": "symlink"}
    return sorted([path, kinds[kind]] for path, kind in (line.split("\t") for line in lines))


def _git_files(root: Path) -> list[str]:
    listed = subprocess.run(
        ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
        cwd=root,
        check=True,
        capture_output=True,
    ).stdout
    return sorted(os.fsdecode(p) for p in listed.split(b"\0") if p)


@pytest.fixture(scope="module")
def results(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict]:
    root = tmp_path_factory.mktemp("fdlimit") / "w"
    root.mkdir()
    _make_tree(root)
    subprocess.run(["git", "init", "-q"], cwd=root, check=True)
    child = subprocess.run(
        [sys.executable, "-c", _CHILD, str(root), str(FD_LIMIT)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert child.returncode == 0, child.stderr[-3000:]
    return root, json.loads(child.stdout)


def test_list_files_lists_every_entry_find_lists(results: tuple[Path, dict]) -> None:
    root, out = results
    expected = _find(root)
    assert out["list_count"] == len(expected) == DEPTH * 8 + DEPTH // 10 * 2
    assert out["list_all"] == expected


def test_glob_finds_every_file_git_lists(results: tuple[Path, dict]) -> None:
    root, out = results
    expected = _git_files(root)
    assert len(expected) == DEPTH * 4 + DEPTH // 10
    assert out["glob"] == expected


def test_grep_searches_every_file_not_ignored(results: tuple[Path, dict]) -> None:
    _, out = results
    spine = ["s/" * level for level in range(DEPTH)]
    expected = sorted([p + "b/leaf.txt" for p in spine] + [p + "f.txt" for p in spine])
    assert out["grep_files"] == expected
    assert out["grep_total"] == 2 * DEPTH


def test_the_index_reads_every_file(results: tuple[Path, dict]) -> None:
    root, out = results
    assert out["index_read"] == sorted(p for p, kind in _find(root) if kind == "file")


def test_a_patch_over_every_level_lands_and_a_checkpoint_restores_the_tree_exactly(
    results: tuple[Path, dict],
) -> None:
    root, out = results
    assert out["patched"] == 2 * DEPTH
    assert out["restore"] == [True, [], []]
    assert _find(root) == out["list_all"]  # what was listed before the changes
    assert [(root / ("s/" * i) / "f.txt").read_text() for i in range(DEPTH)] == [
        f"needle {i}\n" for i in range(DEPTH)
    ]
    deepest = root.joinpath(*["s"] * (DEPTH - 1))
    assert (deepest / "b" / "leaf.txt").read_text() == "needle in b\n"
    assert not (deepest / "new").exists()
