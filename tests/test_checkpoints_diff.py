"""A dry run's diff against git's: which contents are binary (a NUL in the first 8,000
bytes, whatever the encoding), how a link and a change between link and file show, and text
hunks shown in each file's encoding. The oracle is ``git diff --cached`` of a repository
holding the two trees, its hunks compared through unidiff."""

from __future__ import annotations

import shlex
import shutil
import subprocess
import tempfile
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from unidiff import PatchSet

from workspace_tools import ToolSession

# A tree: path -> file bytes, ("x", bytes) for an executable file, ("link", target).
Item = bytes | tuple[str, bytes] | tuple[str, str]
Tree = dict[str, Item]

LATIN1_OLD = "caf\xe9\nna\xefve\nsame \xe0 la fin\n".encode("latin-1")
LATIN1_NEW = "caf\xe9 cr\xe8me\nna\xefve\nsame \xe0 la fin\n".encode("latin-1")


def write_tree(root: Path, files: Tree) -> None:
    for path, item in files.items():
        target = root / path
        target.parent.mkdir(parents=True, exist_ok=True)
        if isinstance(item, tuple) and item[0] == "link":
            target.symlink_to(item[1])
        elif isinstance(item, tuple):
            target.write_bytes(item[1])  # type: ignore[arg-type]
            target.chmod(0o755)
        else:
            target.write_bytes(item)
            target.chmod(0o644)


def change_command(old: Tree, new: Tree) -> str:
    """A shell command turning the tree ``old`` into ``new`` (run as a step)."""
    parts = [f"rm -f {shlex.quote(p)}" for p in old if p not in new or old[p] != new[p]]
    for path, item in new.items():
        if old.get(path) == item:
            continue
        quoted = shlex.quote(path)
        parent = shlex.quote(str(Path(path).parent))
        if isinstance(item, tuple) and item[0] == "link":
            parts.append(f"mkdir -p {parent} && ln -s {shlex.quote(str(item[1]))} {quoted}")
            continue
        data = item[1] if isinstance(item, tuple) else item
        octal = "".join(f"\\{byte:03o}" for byte in data)  # type: ignore[union-attr]
        mode = "755" if isinstance(item, tuple) else "644"
        parts.append(f"mkdir -p {parent} && printf '{octal}' > {quoted} && chmod {mode} {quoted}")
    return " && ".join(parts) or "true"


def git_diff(frm: Tree, to: Tree) -> str:
    """``git diff --cached`` from ``frm`` to ``to``, each line decoded by the codec of the
    side it comes from (context: the old side), as the dry run is to show it."""
    with tempfile.TemporaryDirectory() as tmp:
        repo = Path(tmp)
        git = ["git", "-c", "core.quotepath=on", "-c", "core.symlinks=true", "-C", str(repo)]
        subprocess.run([*git, "init", "-q"], check=True)
        write_tree(repo, frm)
        subprocess.run([*git, "add", "-A"], check=True)
        env = {"GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@t", "PATH": "/usr/bin:/bin"}
        env |= {"GIT_COMMITTER_NAME": "t", "GIT_COMMITTER_EMAIL": "t@t"}
        subprocess.run([*git, "commit", "-q", "--allow-empty", "-m", "a"], check=True, env=env)
        for child in repo.iterdir():
            if child.is_dir() and not child.is_symlink():
                if child.name != ".git":
                    shutil.rmtree(child)
            else:
                child.unlink()
        write_tree(repo, to)
        subprocess.run([*git, "add", "-A"], check=True)
        out = subprocess.run(
            [*git, "diff", "--cached", "--no-renames", "--no-color", "--no-ext-diff"],
            check=True,
            capture_output=True,
        ).stdout
    return out.decode("latin-1")


def codec(item: Item | None) -> str:
    """The encoding the read path gives a content: strict UTF-8, else latin-1."""
    data = b"" if item is None else item[1] if isinstance(item, tuple) else item
    if isinstance(data, str):
        data = data.encode()
    try:
        data.decode("utf-8")
    except UnicodeDecodeError:
        return "latin-1"
    return "utf-8"


def summary(diff: str, frm: Tree | None = None, to: Tree | None = None) -> list[object]:
    """Each file of a diff: its header lines but ``index``, and its hunks' ranges and
    lines; with the trees, the lines are re-decoded from latin-1 by their side's codec."""
    out: list[object] = []
    for patched in PatchSet(diff):
        header = [line for line in patched.patch_info if not line.startswith("index ")]
        hunks = []
        for hunk in patched:
            lines = []
            for line in hunk:
                value = line.value
                if frm is not None and to is not None and line.line_type in " -+":
                    side = to if line.line_type == "+" else frm
                    value = value.encode("latin-1").decode(codec(side.get(patched.path)))
                lines.append((line.line_type, value))
            hunks.append((hunk.source_start, hunk.source_length, hunk.target_start, lines))
        out.append((patched.path, header, hunks))
    return out


def dry_run_diff(tmp_path: Path, now: Tree, before: Tree) -> str:
    """The diff of undoing the step that turned ``before`` into ``now``."""
    root = tmp_path / "ws"
    root.mkdir()
    write_tree(root, before)
    session = ToolSession(root, checkpoints=True)
    result = session.call_sync("run_command", {"command": change_command(before, now)})
    assert result.error is None, result.model_text()
    preview = session.undo(dry_run=True)
    assert preview.dry_run and not preview.applied
    assert session.checkpoints is not None
    session.checkpoints.close()
    return preview.diff


CASES: dict[str, tuple[Tree, Tree, str]] = {
    # name: (the tree now, the tree the undo restores, an exact piece of the diff)
    "latin-1 text": (
        {"l.txt": LATIN1_NEW},
        {"l.txt": LATIN1_OLD},
        "@@ -1,3 +1,3 @@\n-caf\xe9 cr\xe8me\n+caf\xe9\n na\xefve\n",
    ),
    "utf-8 becomes latin-1": (
        {"u.txt": "caf\xe9\n".encode()},
        {"u.txt": LATIN1_OLD},
        "-caf\xe9\n+caf\xe9\n+na\xefve\n",
    ),
    "NUL after 8000 bytes is text": (
        {"n.txt": b"a\n" * 4000 + b"\0tail\n"},
        {"n.txt": b"a\n" * 4000 + b"\0TAIL\n"},
        "-\0tail\n+\0TAIL\n",
    ),
    "NUL in the first 8000 bytes is binary": (
        {"b.txt": b"a\n" * 3999 + b"\0tail\n"},
        {"b.txt": b"a\n" * 3999 + b"\0TAIL\n"},
        "diff --git a/b.txt b/b.txt\nBinary files a/b.txt and b/b.txt differ\n",
    ),
    "utf-16 is binary": (
        {"w.txt": "\ufeffhi\n".encode("utf-16-le")},
        {"w.txt": "\ufeffho\n".encode("utf-16-le")},
        "Binary files a/w.txt and b/w.txt differ\n",
    ),
    "a link's target": (
        {"link": ("link", "b.txt"), "a.txt": b"A\n", "b.txt": b"B\n"},
        {"link": ("link", "a.txt"), "a.txt": b"A\n", "b.txt": b"B\n"},
        "diff --git a/link b/link\n--- a/link\n+++ b/link\n@@ -1 +1 @@\n-b.txt\n"
        "\\ No newline at end of file\n+a.txt\n\\ No newline at end of file\n",
    ),
    "a file becomes a link": (
        {"x": b"content\n", "t": b"t\n"},
        {"x": ("link", "t"), "t": b"t\n"},
        "diff --git a/x b/x\ndeleted file mode 100644\n--- a/x\n+++ /dev/null\n@@ -1 +0,0 @@\n"
        "-content\ndiff --git a/x b/x\nnew file mode 120000\n--- /dev/null\n+++ b/x\n"
        "@@ -0,0 +1 @@\n+t\n\\ No newline at end of file\n",
    ),
    "a link becomes a file": (
        {"x": ("link", "t"), "t": b"t\n"},
        {"x": b"content\n", "t": b"t\n"},
        "deleted file mode 120000\n",
    ),
    "a binary file becomes a link, mode changes": (
        {"x": b"\0\1", "run": b"echo\n"},
        {"x": ("link", "run"), "run": ("x", b"echo\n")},
        "diff --git a/x b/x\ndeleted file mode 100644\nBinary files a/x and /dev/null differ\n",
    ),
    "a latin-1 file made and removed": (
        {"gone.txt": b"x\n", "made.txt": LATIN1_NEW},
        {"gone.txt": LATIN1_OLD},
        "+++ /dev/null\n@@ -1,3 +0,0 @@\n-caf\xe9 cr\xe8me\n",
    ),
}


@pytest.mark.parametrize("name", CASES)
def test_dry_run_diff_is_gits_with_each_file_in_its_encoding(tmp_path: Path, name: str) -> None:
    now, before, piece = CASES[name]
    diff = dry_run_diff(tmp_path, now, before)
    assert piece in diff, diff
    assert summary(diff) == summary(git_diff(now, before), now, before), diff


def test_a_link_to_a_changed_file_shows_no_change_of_the_link(tmp_path: Path) -> None:
    # Only the file the link points to changes: the link is no part of the diff.
    now: Tree = {"link": ("link", "a.txt"), "a.txt": b"new\n"}
    before: Tree = {"link": ("link", "a.txt"), "a.txt": b"old\n"}
    diff = dry_run_diff(tmp_path, now, before)
    assert diff == (
        "diff --git a/a.txt b/a.txt\n--- a/a.txt\n+++ b/a.txt\n@@ -1 +1 @@\n-new\n+old\n"
    )


CONTENT = st.binary(max_size=30) | st.sampled_from(
    [b"", LATIN1_OLD, LATIN1_NEW, "\xe9t\xe9\r\n".encode(), b"x\0y\n"]
)
ITEM = (
    CONTENT
    | st.tuples(st.just("x"), CONTENT)
    | st.tuples(st.just("link"), st.sampled_from(["a", "b", "../out", "caf\xe9"]))
)
TREE = st.dictionaries(st.sampled_from(["a", "b", "d/c"]), ITEM, max_size=3)


@settings(max_examples=40, deadline=None)
@given(TREE, TREE)
def test_dry_run_diff_property_against_git(now: Tree, before: Tree) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        diff = dry_run_diff(Path(tmp), now, before)
    assert summary(diff) == summary(git_diff(now, before), now, before), diff
