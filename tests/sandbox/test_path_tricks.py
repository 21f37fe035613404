"""A sandboxed command cannot reach a host file outside the workspace by another name of it:
``/proc/self/root``, ``/proc/1/root`` and ``/proc/1/cwd`` (the namespace's first process),
a path climbing out of the workspace with ``..``, a symbolic link made in the workspace.
The host's view of the file (contents, mode, owner, times, extended attributes) is the
oracle; a control run without layers proves each plain name reaches the file.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tests.sandbox._boxes import NewBox
from tests.sandbox.test_call_confinement import command_box, outside, snapshot, workspace

pytestmark = pytest.mark.anyio

__all__ = ["outside", "workspace"]  # fixtures the tests here take

#: Each try appends one byte to the file by another name and says whether it could.
TRIES = r"""
o=$1; rel=$2
try() {
  name=$1; shift
  if ("$@") 2>/dev/null; then echo "$name ok"; else echo "$name refused"; fi
}
try direct sh -c 'printf x >> "$0"' "$o"
try proc_self_root sh -c 'printf x >> "/proc/self/root$0"' "$o"
try relative sh -c 'printf x >> "$0"' "$rel"
try symlink sh -c 'ln -s "$0" link && printf x >> link' "$o"
try proc_1_root sh -c 'printf x >> "/proc/1/root$0"' "$o"
try proc_1_cwd sh -c 'cd "/proc/1/cwd" && printf x >> ".$0"' "$o"
"""
PLAIN_NAMES = ("direct", "proc_self_root", "relative", "symlink")
PROC_1_NAMES = ("proc_1_root", "proc_1_cwd")


@pytest.mark.parametrize("mode", ["plain", "bubblewrap", "landlock"])
async def test_no_other_name_of_an_outside_file_is_writable(
    new_box: NewBox, outside: Path, workspace: Path, mode: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    before = snapshot(outside)
    box = command_box(new_box, mode, workspace, monkeypatch)
    relative = os.path.relpath(outside, workspace)

    result = await box.run(["sh", "-c", TRIES, "tries", str(outside), relative], cwd=str(workspace))

    seen = dict(line.split(" ") for line in result.stdout.complete.decode().splitlines())
    assert list(seen) == [*PLAIN_NAMES, *PROC_1_NAMES], result
    if mode == "plain":
        # The host's first process is init (its cwd "/"): only root may use its names.
        assert {n: seen[n] for n in PLAIN_NAMES} == dict.fromkeys(PLAIN_NAMES, "ok"), seen
        written = list(seen.values()).count("ok")
        assert outside.read_bytes() == before["content"] + b"x" * written
    else:
        assert seen == dict.fromkeys(seen, "refused"), result.stderr.complete
        assert snapshot(outside) == before
