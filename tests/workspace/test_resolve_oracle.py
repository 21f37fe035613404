"""The resolution of a path by fd, one name at a time (linear in its depth), finds what
``os.path.realpath`` finds, whatever the links: relative, absolute, chained, dangling,
looping, through ``..``, out of the root and back in."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from workspace_tools import ErrorCode, ToolError
from workspace_tools.workspace._paths import _MAX_LINKS, _resolve, resolve_path

LINKS = ["l1", "l2", "d/l3", "d/e/l4", "f.txt/l5"]
TARGETS = ["d", "d/e", "..", "../..", ".", "f.txt", "missing", "missing/x", "l1", "l2", "d/l3"]
TARGETS += ["l1/..", "e/../..", "{root}", "{root}/d/e", "{base}", "{base}/out", "/", "/tmp/.."]
COMPONENTS = ["..", ".", "d", "e", "l1", "l2", "l3", "l4", "f.txt", "missing", "w", "out", ""]


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    links=st.dictionaries(st.sampled_from(LINKS), st.sampled_from(TARGETS), max_size=4),
    parts=st.lists(st.sampled_from(COMPONENTS), min_size=1, max_size=7),
    absolute=st.booleans(),
)
def test_resolution_matches_realpath(
    links: dict[str, str], parts: list[str], absolute: bool
) -> None:
    with tempfile.TemporaryDirectory() as temp:
        base = Path(temp).resolve()
        root = base / "w"
        (root / "d" / "e").mkdir(parents=True)
        (base / "out").mkdir()
        (root / "f.txt").write_bytes(b"")
        for name, target in links.items():
            if (root / name).parent.is_dir():
                (root / name).symlink_to(target.format(root=root, base=base))
        target = (str(root) + "/" if absolute else str(root) + "/d/../") + "/".join(parts)
        found = _resolve(target)
        assert found.path == os.path.realpath(target), (target, found)
        if not found.loop:
            assert found.kind == (
                None
                if not os.path.lexists(found.path)
                else "dir"
                if os.path.isdir(found.path)
                else "other"
            ), (target, found)
        else:
            assert os.path.realpath(target) == found.path  # realpath leaves the loop too
            try:
                os.stat(target)
            except OSError as exc:
                assert exc.errno == 40, exc  # ELOOP: the kernel agrees there is a loop
            else:
                raise AssertionError(f"no loop in {target}")


def test_a_path_through_more_links_than_the_kernel_follows_is_refused(tmp_path: Path) -> None:
    root = tmp_path / "w"
    root.mkdir()
    (root / "f.txt").write_bytes(b"")
    (root / "l0").symlink_to("f.txt")
    for index in range(1, _MAX_LINKS + 1):
        (root / f"l{index}").symlink_to(f"l{index - 1}")
    assert resolve_path(str(root), f"l{_MAX_LINKS - 1}").real == root / "f.txt"
    try:
        resolve_path(str(root), f"l{_MAX_LINKS}")
    except ToolError as exc:
        assert exc.code is ErrorCode.NOT_FOUND
        assert exc.message == (
            f"Path 'l{_MAX_LINKS}' goes through more than {_MAX_LINKS} symbolic links; name "
            "the file by a path with fewer links"
        )
    else:
        raise AssertionError("a chain of 41 links was followed")
