from __future__ import annotations

from pathlib import Path

import pytest

from workspace_tools import ErrorCode, ToolError, Workspace


@pytest.fixture
def root(tmp_path: Path) -> Path:
    path = tmp_path / "w"
    (path / "sub" / "deep").mkdir(parents=True)
    (tmp_path / "w-evil").mkdir()
    (path / "link").symlink_to("sub/deep")
    (path / "file.txt").write_bytes(b"")
    (path / "alias.txt").symlink_to("file.txt")
    return path


@pytest.mark.parametrize(
    ("path", "real", "rel"),
    [
        ("file.txt", "file.txt", "file.txt"),
        ("./sub/../file.txt", "file.txt", "file.txt"),
        ("alias.txt", "file.txt", "alias.txt"),
        ("link/x.txt", "sub/deep/x.txt", "link/x.txt"),
        # ".." after a link leaves the link's target, not the link's parent.
        ("link/../y.txt", "sub/y.txt", "sub/y.txt"),
        (".", ".", "."),
        ("{root}/sub", "sub", "sub"),
    ],
)
def test_resolve_shows_paths_relative_to_the_root(
    root: Path, path: str, real: str, rel: str
) -> None:
    resolved = Workspace(root).resolve(path.format(root=root))
    assert resolved.real == (root / real).resolve()
    assert resolved.rel == rel


@pytest.mark.parametrize(
    ("path", "code"),
    [
        ("../w-evil/x", ErrorCode.OUTSIDE_WORKSPACE),
        ("{root}-evil/x", ErrorCode.OUTSIDE_WORKSPACE),
        ("/etc/passwd", ErrorCode.OUTSIDE_WORKSPACE),
        ("sub/../../w/file.txt", None),
        ("a\x00b", ErrorCode.INVALID_ARGUMENTS),
        ("  ", ErrorCode.INVALID_ARGUMENTS),
        ("loop/x", ErrorCode.NOT_FOUND),
    ],
)
def test_resolve_refusals(root: Path, path: str, code: ErrorCode | None) -> None:
    (root / "loop").symlink_to("loop")
    workspace = Workspace(root)
    if code is None:
        assert workspace.resolve(path).rel == "file.txt"
        return
    with pytest.raises(ToolError) as caught:
        workspace.resolve(path.format(root=root))
    assert caught.value.code is code


@pytest.mark.parametrize(
    ("path", "how"),
    [
        # As written these name places inside the root: only a link took them out.
        ("out/python3", " through a symbolic link"),
        ("out", " through a symbolic link"),
        ("sub/out-too", " through a symbolic link"),
        # Written outside, no link involved: no link named.
        ("../w-evil/x", ""),
        ("/etc/passwd", ""),
    ],
)
def test_outside_says_when_a_link_led_there(root: Path, path: str, how: str) -> None:
    (root / "out").symlink_to(root.parent / "w-evil")
    (root / "sub" / "out-too").symlink_to("../../w-evil")
    with pytest.raises(ToolError) as caught:
        Workspace(root).resolve(path)
    assert (caught.value.code, caught.value.message) == (
        ErrorCode.OUTSIDE_WORKSPACE,
        f"Path '{path}' is outside the workspace root{how}; use a path inside it",
    )
