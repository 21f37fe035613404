"""The tree the stale-cache state machine works on: how it is changed (in Python or by a
shell command) and what outside oracles say of it (git, ripgrep, the file's bytes)."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

#: Paths a change or a call may name (file, directory or symlink at different times).
NAMES = [
    "a.txt",
    "b.txt",
    "x.tmp",
    "sub/c.py",
    "sub/d.py",
    "sub/deep/e.md",
    "other/f.txt",
    "ignored/g.txt",
    "big.log",
]
DIRS = ["sub", "other", "sub/deep", "ignored", "alt"]
WORDS = ["alpha", "beta", "NEEDLE", "needle", "delta_x", "foo()", "gamma", "zeta"]
#: Rules the ignore files hold at times.
RULES = ["*.tmp", "ignored/", "*.md", "deep/", "b.txt", "sub/d.py", "other", "!e.md", "c.*"]
IGNORE_FILES = [".gitignore", "sub/.gitignore", ".ignore", ".git/info/exclude", "global"]
#: An old time, as ``touch -d``, ``cp -p`` or ``tar x`` set it (nanoseconds).
OLD_NS = 1_600_000_000_123_456_789


def initial_tree(root: Path, home: Path) -> None:
    """A git repository (nothing committed) with files in every role the names play."""
    git(root, "init", "-q")
    for rel in NAMES:
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(big_text(0) if rel == "big.log" else text(rel))
    (root / "alt").mkdir()
    (root / "alt" / "h.txt").write_bytes(b"alt NEEDLE here\n")
    (root / "link").symlink_to("sub")
    (root / "flink").symlink_to("a.txt")
    (root / ".gitignore").write_bytes(b"*.tmp\nignored/\n")
    (home / "git").mkdir(parents=True, exist_ok=True)


def text(seed: str) -> bytes:
    """A few lines of words, chosen by ``seed``."""
    n = sum(map(ord, seed))
    lines = [" ".join(WORDS[(n + i * j) % len(WORDS)] for j in range(1, 4)) for i in range(3)]
    return ("\n".join(lines) + "\n").encode()


def big_text(seed: int) -> bytes:
    """About 30 KB of lines of varying length: read_file streams it (max_file_bytes is
    small in the machine) and keeps its line index."""
    return b"".join(
        b"row %d %s\n" % (n, b"x" * ((n * 7 + seed) % 13))
        + (b"NEEDLE\n" if n % 97 == seed else b"")
        for n in range(1, 1500)
    )


def git(root: Path, *args: str) -> str:
    proc = subprocess.run(
        ["git", "-c", "core.fsmonitor=false", *args],
        cwd=root,
        capture_output=True,
        check=True,
    )
    return os.fsdecode(proc.stdout)


def kind(path: Path) -> str:
    """``file``, ``dir``, ``link`` or ``none``: what is at ``path`` (never following)."""
    if path.is_symlink():
        return "link"
    if path.is_dir():
        return "dir"
    if path.exists():
        return "file"
    return "none"


def parent_is_dir(root: Path, rel: str) -> bool:
    """Whether every directory above ``rel`` is a real directory (no link, no file)."""
    path = root
    for part in rel.split("/")[:-1]:
        path = path / part
        if kind(path) != "dir":
            return False
    return True


def remove(path: Path) -> None:
    if kind(path) == "dir":
        shutil.rmtree(path)
    elif kind(path) != "none":
        path.unlink()


def same_size(old: bytes, new: bytes) -> bytes:
    """``new`` cut or padded to ``old``'s length, and different from it where it can be."""
    out = (new * (len(old) // max(len(new), 1) + 1))[: len(old)]
    if out == old and old:
        out = bytes([old[0] ^ 0x01]) + old[1:]
    return out


def ignore_path(root: Path, home: Path, which: str) -> Path:
    return home / "git" / "ignore" if which == "global" else root / which


def rg_files(root: Path, pattern: str, fixed: bool, path: str) -> set[str] | None:
    """Files ripgrep finds ``pattern`` in below ``path`` (hidden files too, no links
    followed, git's ignore rules), relative to ``root``; ``None`` without ripgrep."""
    if shutil.which("rg") is None:
        return None
    args = ["rg", "--hidden", "--no-messages", "-l", "--no-config", "--sort=path"]
    if fixed:
        args.append("-F")
    proc = subprocess.run(
        [*args, "-e", pattern, "--", path], cwd=root, capture_output=True, check=False
    )
    names = os.fsdecode(proc.stdout).splitlines()
    return {os.path.normpath(n) for n in names}


def git_listed(root: Path) -> set[str]:
    """``git ls-files -co --exclude-standard`` less what is gone from disk."""
    listed = set(git(root, "ls-files", "-z", "-co", "--exclude-standard").split("\0")) - {""}
    deleted = set(git(root, "ls-files", "-z", "-d").split("\0"))
    return listed - deleted


def expected_read(data: bytes) -> str | None:
    """What read_file shows of a whole small ASCII file with LF line ends, or ``None``
    for a file this simple rendering does not cover."""
    if not data or b"\r" in data or not data.isascii() or b"\0" in data:
        return None
    lines = data.decode().split("\n")
    if lines[-1] == "":
        lines.pop()
    if len(lines) > 2000 or any(len(line) > 2000 for line in lines):
        return None
    return "\n".join(f"{n:6}\t{line}" for n, line in enumerate(lines, 1))
