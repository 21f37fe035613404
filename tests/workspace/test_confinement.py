"""Property: whatever the layout of links and whatever the path, a file tool either works on
a file whose real location is inside the root or refuses, and never changes anything outside."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.file_support import call, tools
from workspace_tools import ErrorCode

LINK_NAMES = ["l1", "l2", "d/l3", "d/e/l4"]
TARGETS = [
    "{out}",
    "{out}/secret.txt",
    "{out}/missing.txt",
    "{base}/w-evil",
    "../outside/secret.txt",
    "../../outside",
    "../w-evil/x.txt",
    "d",
    "f.txt",
    "l1",
    "l2",
    "missing",
    "d/../..",
    ".",
    "..",
    "{root}/f.txt",
]
COMPONENTS = ["..", ".", "d", "e", "l1", "l2", "l3", "l4", "f.txt", "secret.txt", "new.txt"]
COMPONENTS += ["w-evil", "outside", "x.txt", "missing", "w"]


def _snapshot(base: Path, root: Path) -> dict[str, object]:
    seen: dict[str, object] = {}
    for folder, dirs, files in os.walk(base):
        for name in dirs + files:
            path = Path(folder) / name
            if root in path.parents or path == root:
                continue
            if path.is_symlink():
                seen[str(path)] = ("link", os.readlink(path))
            elif path.is_file():
                seen[str(path)] = path.read_bytes()
            else:
                seen[str(path)] = "dir"
    return seen


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    links=st.dictionaries(st.sampled_from(LINK_NAMES), st.sampled_from(TARGETS), max_size=4),
    parts=st.lists(st.sampled_from(COMPONENTS), min_size=1, max_size=5),
    anchor=st.sampled_from(["", "{root}/", "{base}/", "/"]),
    tool_name=st.sampled_from(["write_file", "edit_file", "read_file"]),
)
def test_tools_stay_inside_the_root(
    links: dict[str, str], parts: list[str], anchor: str, tool_name: str
) -> None:
    with tempfile.TemporaryDirectory() as temp:
        base = Path(temp).resolve()
        root, out = base / "w", base / "outside"
        (root / "d" / "e").mkdir(parents=True)
        out.mkdir()
        (base / "w-evil").mkdir()
        (out / "secret.txt").write_bytes(b"secret\n")
        (root / "f.txt").write_bytes(b"secret\n")
        names = {"root": root, "base": base, "out": out}
        for name, target in links.items():
            (root / name).symlink_to(target.format(**names))
        path = anchor.format(**names) + "/".join(parts)
        before = _snapshot(base, root)

        arguments = {
            "write_file": {"content": "changed\n"},
            "edit_file": {"old_text": "secret", "new_text": "changed"},
            "read_file": {},
        }[tool_name]
        result = call(tools(root)[tool_name], path=path, **arguments)

        assert _snapshot(base, root) == before
        joined = os.path.join(root, path)
        real = os.path.realpath(joined)
        inside = real == str(root) or real.startswith(str(root) + os.sep)
        if not inside:
            assert result.error_code is ErrorCode.OUTSIDE_WORKSPACE
        if result.error is None:
            assert inside
            assert Path(real).is_file()
            assert result.content is not None
