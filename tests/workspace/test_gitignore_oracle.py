"""The discovery tools list exactly what git lists, on generated trees and on this repository."""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.discovery_helpers import discovered, git, git_listed
from workspace_tools.text._decode import looks_binary

pytestmark = pytest.mark.skipif(shutil.which("git") is None, reason="git is the oracle")

DIR_NAMES = ["a", "b", "build", "logs", ".hid", "sub dir", "x[1]"]
FILE_NAMES = [
    "a",
    "x.log",
    "keep.log",
    "root.txt",
    "b.txt",
    ".env",
    "#c",
    "!d",
    "e ",
    "café",
    "caf",
    "f[1].py",
    "g*h",
    "build",
    "n.o",
]
SEGMENTS = [
    *DIR_NAMES[:5],
    *["a", "x.log", "keep.log", "root.txt", "build", "n.o"],
    "*",
    "?",
    "*.log",
    "*.txt",
    "[ab]",
    "[!a]*",
    "[a-c]*",
    "b*",
    "caf?",
    "caf??",
    "\\#c",
    "\\!d",
    "e\\ ",
    "**",
    "f\\[1\\].py",
    "g\\*h",
    "x\\[1]",
    "[[:alpha:]]*",
    "*.[oa]",
]


@st.composite
def patterns(draw: st.DrawFn) -> str:
    kind = draw(st.sampled_from(["rule"] * 8 + ["comment", "blank"]))
    if kind == "comment":
        return "#" + draw(st.sampled_from(FILE_NAMES))
    if kind == "blank":
        return draw(st.sampled_from(["", "   "]))
    body = "/".join(draw(st.lists(st.sampled_from(SEGMENTS), min_size=1, max_size=3)))
    neg = draw(st.sampled_from(["", "", "!"]))
    lead = draw(st.sampled_from(["", "", "/", "**/"]))
    if draw(st.booleans()):
        body = draw(st.sampled_from(FILE_NAMES + DIR_NAMES)).replace("[", "\\[")
    trail = draw(st.sampled_from(["", "", "/"]))
    spaces = draw(st.sampled_from(["", "", "  ", "\r"]))
    return neg + lead + body + trail + spaces


@st.composite
def trees(draw: st.DrawFn) -> dict[str, object]:
    dirs = draw(
        st.lists(
            st.lists(st.sampled_from(DIR_NAMES), min_size=0, max_size=3).map("/".join),
            min_size=1,
            max_size=5,
            unique=True,
        )
    )
    files = {
        f"{d}/{name}" if d else name
        for d in dirs
        for name in draw(st.lists(st.sampled_from(FILE_NAMES), max_size=5, unique=True))
    }
    ignores = {
        d: draw(st.lists(patterns(), min_size=2, max_size=6))
        for d in draw(st.lists(st.sampled_from(["", *dirs]), min_size=1, max_size=3, unique=True))
    }
    exclude = draw(st.lists(patterns(), max_size=2))
    tracked = draw(st.lists(st.sampled_from(sorted(files)), max_size=3)) if files else []
    return {"files": files, "ignores": ignores, "exclude": exclude, "tracked": tracked}


def build_tree(root: Path, tree: dict[str, object]) -> None:
    git(root, "init", "-q")
    made: set[str] = set()
    for rel in sorted(tree["files"]):  # type: ignore[arg-type]
        path = root / rel
        # A name used both as a file and as a directory: keep whichever came first.
        parts = rel.split("/")
        if any("/".join(parts[:i]) in made for i in range(1, len(parts))):
            continue
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text("x\n")
        except (IsADirectoryError, NotADirectoryError, FileExistsError):
            continue
        made.add(rel)
    for d, lines in tree["ignores"].items():  # type: ignore[union-attr]
        directory = root / d if d else root
        if directory.is_dir():
            (directory / ".gitignore").write_text("\n".join(lines) + "\n")
    (root / ".git" / "info").mkdir(exist_ok=True)
    (root / ".git" / "info" / "exclude").write_text("\n".join(tree["exclude"]) + "\n")  # type: ignore[arg-type]
    for rel in tree["tracked"]:  # type: ignore[union-attr]
        if (root / rel).is_file():
            git(root, "add", "-f", "--", rel)


@settings(
    max_examples=50,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
@given(trees())
def test_discovery_lists_what_git_lists_on_generated_trees(tree: dict[str, object]) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        build_tree(root, tree)
        expected = git_listed(root)
        listed, globbed, grepped = discovered(root)
        assert listed == expected
        assert globbed == expected
        assert grepped == expected


def test_discovery_lists_what_git_lists_on_this_repository() -> None:
    root = Path(__file__).resolve().parents[2]
    if not (root / ".git").exists():
        pytest.skip("not a git checkout")
    expected = git_listed(root)
    listed, globbed, grepped = discovered(root)
    assert listed == expected
    assert globbed == expected
    # grep skips empty files (nothing to match) and binaries (NULs without a UTF-16/32 BOM).
    texts = {
        p
        for p in expected
        if (root / p).is_file()
        and (root / p).stat().st_size
        and not looks_binary((root / p).read_bytes()[:8192])
    }
    assert grepped == texts
