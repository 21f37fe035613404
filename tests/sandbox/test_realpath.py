"""The sandbox's path resolution (``sandbox.layers._realpath.realpath``) is
``os.path.realpath``, whatever the tree: links relative and absolute, chained, dangling,
in loops, through files and missing names, ``..`` after any of them; and its work grows
linearly with the depth, where realpath's grows with its square."""

from __future__ import annotations

import os
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sandbox.layers._realpath import realpath

NAMES = ["a", "b", "c", "l1", "l2", "f"]
# A path component as a query or a link target may hold it.
COMPONENTS = st.sampled_from([*NAMES, "..", ".", "", "missing"])


@st.composite
def trees(draw: st.DrawFn) -> list[tuple[str, str, str | None]]:
    """Entries ``(kind, path, link target)`` to make in order below a scratch root: a few
    directories, files and links (relative or absolute from the root, marked ``//``)."""
    entries: list[tuple[str, str, str | None]] = []
    made: list[str] = [""]
    for _ in range(draw(st.integers(1, 12))):
        parent = draw(st.sampled_from(made))
        name = draw(st.sampled_from(NAMES))
        path = f"{parent}/{name}" if parent else name
        if any(path == p or path.startswith(p + "/") for _, p, _ in entries):
            continue
        kind = draw(st.sampled_from(["dir", "file", "link", "link"]))
        target = None
        if kind == "link":
            target = "/".join(draw(st.lists(COMPONENTS, min_size=1, max_size=4))) or "."
            if draw(st.booleans()):
                target = "//" + target  # from the root: absolute once the root is known
        entries.append((kind, path, target))
        if kind == "dir":
            made.append(path)
    return entries


def _make(root: str, entries: list[tuple[str, str, str | None]]) -> None:
    for kind, path, target in entries:
        full = os.path.join(root, path)
        if not os.path.isdir(os.path.dirname(full)) or os.path.lexists(full):
            continue  # its parent is a link or a file: left out
        if kind == "dir":
            os.mkdir(full)
        elif kind == "file":
            Path(full).write_text("x")
        else:
            assert target is not None
            os.symlink(root + "/" + target[2:] if target.startswith("//") else target, full)


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    entries=trees(),
    query=st.lists(COMPONENTS, min_size=0, max_size=7),
    absolute=st.booleans(),
    trailing=st.booleans(),
)
def test_it_is_realpath(
    entries: list[tuple[str, str, str | None]], query: list[str], absolute: bool, trailing: bool
) -> None:
    with tempfile.TemporaryDirectory() as scratch:
        root = os.path.realpath(scratch) + "/w"
        os.mkdir(root)
        _make(root, entries)
        relative = "/".join(query) + ("/" if trailing else "")
        if absolute:
            target = root + "/" + relative
            assert realpath(target) == os.path.realpath(target), (entries, target)
        else:
            cwd = os.getcwd()
            os.chdir(root)
            try:
                assert realpath(relative) == os.path.realpath(relative), (entries, relative)
            finally:
                os.chdir(cwd)


@pytest.mark.parametrize(
    "links",
    [
        {"loop": "loop"},  # a link to itself
        {"x": "y", "y": "x"},  # two in a ring
        {"x": "y/z", "y": "x/.."},  # a ring through a name below
        {"chain0": "chain1", **{f"chain{i}": f"chain{i + 1}" for i in range(1, 60)}},  # long
        {"up": "..", "upup": "up/up/up"},
        {"abs": "ROOT/d", "rel": "d/../abs/../missing"},
        {"dangling": "nowhere/at/all"},
        {"twice": "d/../d", "both": "twice/twice/../twice"},
    ],
)
@pytest.mark.parametrize("tail", ["", "/", "/x", "/../d", "/./.."])
def test_named_cases_are_realpath(tmp_path: Path, links: dict[str, str], tail: str) -> None:
    root = os.path.realpath(tmp_path)
    os.mkdir(root + "/d")
    for name, target in links.items():
        os.symlink(target.replace("ROOT", root), f"{root}/{name}")
    for name in links:
        path = f"{root}/{name}{tail}"
        assert realpath(path) == os.path.realpath(path), path


def _chain(root: str, depth: int, link_every: int) -> str:
    """A directory ``depth`` levels below ``root`` by a path in which every
    ``link_every``-th name is a link to its sibling directory."""
    os.mkdir(root)
    fd = os.open(root, os.O_RDONLY | os.O_DIRECTORY)
    names = []
    for level in range(depth):
        os.mkdir("d", dir_fd=fd)
        if level % link_every == 0:
            os.symlink("d", "s", dir_fd=fd)
            names.append("s")
        else:
            names.append("d")
        child = os.open("d", os.O_RDONLY | os.O_DIRECTORY, dir_fd=fd)
        os.close(fd)
        fd = child
    os.close(fd)
    return root + "/" + "/".join(names)


def _counting(monkeypatch: pytest.MonkeyPatch) -> Callable[[], int]:
    """Count the path components handed to the kernel from now on."""
    count = [0]

    def counted(real: Callable[..., Any]) -> Callable[..., Any]:
        def call(*args: Any, **kwargs: Any) -> Any:
            first = args[0] if args else None
            count[0] += os.fsdecode(first).count("/") + 1 if isinstance(first, str) else 1
            return real(*args, **kwargs)

        return call

    for name in ("open", "stat", "lstat", "readlink"):
        monkeypatch.setattr(os, name, counted(getattr(os, name)))
    return lambda: count[0]


def test_its_work_grows_linearly_with_the_depth(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Four times the depth: linear work is at most four times as much, quadratic sixteen.
    deep = {depth: _chain(str(tmp_path / str(depth)), depth, 5) for depth in (200, 800)}
    expected = {depth: os.path.realpath(path) for depth, path in deep.items()}
    count = _counting(monkeypatch)
    work = {}
    for depth, path in deep.items():
        before = count()
        assert realpath(path) == expected[depth]
        work[depth] = count() - before
    assert work[800] < 5 * work[200], work


def test_a_sandbox_resolves_the_paths_it_is_given_as_realpath(tmp_path: Path) -> None:
    from sandbox import Sandbox

    tmp_path = Path(os.path.realpath(tmp_path))
    deep = _chain(str(tmp_path / "deep"), 300, 7)
    for name in ("secret", "kept", "open"):
        (tmp_path / name).mkdir()
        (tmp_path / f"to-{name}").symlink_to(tmp_path / name)
    box = Sandbox(
        layers=False,
        best_effort=True,
        writable=[deep, str(tmp_path / "deep") + "/s/../s/d/.."],
        read_denied=[str(tmp_path / "to-secret"), str(tmp_path / "to-kept/")],
        allow_read=[str(tmp_path / "to-secret/.")],
    )
    assert box.confinement.writable == (
        os.path.realpath(deep),
        os.path.realpath(str(tmp_path / "deep") + "/s/../s/d/.."),
    )
    denied = box.confinement.read_denied
    assert str(tmp_path / "kept") in denied
    assert {str(tmp_path / "secret"), str(tmp_path / "to-secret")} & set(denied) == set()
    widened = box.confined_to(str(tmp_path / "to-open"))
    assert widened.confinement.writable[-1] == str(tmp_path / "open")
