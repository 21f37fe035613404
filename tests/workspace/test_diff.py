from __future__ import annotations

import random
import subprocess
from pathlib import Path

import pytest
from unidiff import PatchSet

from workspace_tools.text._diff import unified_diff


@pytest.mark.parametrize(
    ("old", "new", "path", "expected"),
    [
        (
            "a\nb\nc\n",
            "a\nB\nc\n",
            "f.txt",
            "diff --git a/f.txt b/f.txt\n--- a/f.txt\n+++ b/f.txt\n"
            "@@ -1,3 +1,3 @@\n a\n-b\n+B\n c\n",
        ),
        (
            None,
            "x\ny",
            "d/n.txt",
            "diff --git a/d/n.txt b/d/n.txt\nnew file mode 100644\n--- /dev/null\n"
            "+++ b/d/n.txt\n@@ -0,0 +1,2 @@\n+x\n+y\n\\ No newline at end of file\n",
        ),
        (
            None,
            "",
            "empty",
            "diff --git a/empty b/empty\nnew file mode 100644\n",
        ),
        (
            "a\r\nb",
            "a\r\nb\r\n",
            "f",
            "diff --git a/f b/f\n--- a/f\n+++ b/f\n@@ -1,2 +1,2 @@\n a\r\n-b\n"
            "\\ No newline at end of file\n+b\r\n",
        ),
        (
            "a\n",
            "",
            "f",
            "diff --git a/f b/f\n--- a/f\n+++ b/f\n@@ -1 +0,0 @@\n-a\n",
        ),
        (
            "x\n",
            "y\n",
            'sp ace/é"q.txt',
            'diff --git "a/sp ace/\\303\\251\\"q.txt" "b/sp ace/\\303\\251\\"q.txt"\n'
            '--- "a/sp ace/\\303\\251\\"q.txt"\n+++ "b/sp ace/\\303\\251\\"q.txt"\n'
            "@@ -1 +1 @@\n-x\n+y\n",
        ),
        ("same\n", "same\n", "f", ""),
    ],
    ids=["change", "created", "created_empty", "crlf_final_newline", "emptied", "quoted", "same"],
)
def test_unified_diff_exact_text(old: str | None, new: str, path: str, expected: str) -> None:
    assert unified_diff(old, new, path).diff == expected


def test_hunks_merge_only_when_contexts_touch() -> None:
    old = "".join(f"{i}\n" for i in range(30))
    new = old.replace("3\n", "three\n", 1).replace("10\n", "ten\n").replace("25\n", "x\n")
    hunks = [h for h in unified_diff(old, new, "f").diff.splitlines() if h.startswith("@@")]
    assert hunks == ["@@ -1,14 +1,14 @@", "@@ -23,7 +23,7 @@"]


def _git_apply(tmp_path: Path, old: str, diff: str) -> bytes:
    (tmp_path / "f").write_bytes(old.encode())
    subprocess.run(["git", "apply", "-"], input=diff.encode(), cwd=tmp_path, check=True)
    return (tmp_path / "f").read_bytes()


@pytest.mark.parametrize("seed", range(8))
def test_diffs_of_large_texts_apply(tmp_path: Path, seed: int) -> None:
    rng = random.Random(seed)
    lines = [f"line {i} {'x' * rng.randrange(80)}\n" for i in range(20_000)]
    old = "".join(lines)
    for _ in range(rng.randint(1, 4)):
        at = rng.randrange(len(lines))
        lines[at : at + rng.randint(0, 3)] = [f"changed {rng.random()}\n"] * rng.randint(0, 3)
    new = "".join(lines)
    result = unified_diff(old, new, "f")
    assert _git_apply(tmp_path, old, result.diff) == new.encode()
    patch = PatchSet(result.diff)
    assert (result.additions, result.deletions) == (patch[0].added, patch[0].removed)
