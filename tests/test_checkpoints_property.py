"""Property: any sequence of writes, deletes, creates and mode changes, through the file
tools and through commands, undone step by step, gives back the tree byte for byte."""

from __future__ import annotations

import shlex
import tempfile
from pathlib import Path

from hypothesis import given, settings
from hypothesis import strategies as st

from tests.test_checkpoints import tree
from workspace_tools import ToolSession

# Names a shell quotes, one that is not UTF-8 (its byte as a surrogate), and a directory.
PATHS = ["a.txt", "b", "d/c.txt", "d/e/f", "d", "d/sp ace", "nl\nx", "d/\udcff.bin"]
CONTENTS = st.binary(max_size=40) | st.sampled_from([b"", b"x\r\ny\n", b"\xff\xfe\x00"])

write_file = st.tuples(st.just("write_file"), st.sampled_from(PATHS), st.text(max_size=20))
shell_write = st.tuples(st.just("shell_write"), st.sampled_from(PATHS), CONTENTS)
remove = st.tuples(st.just("remove"), st.sampled_from(PATHS), st.none())
chmod = st.tuples(
    st.just("chmod"), st.sampled_from(PATHS), st.sampled_from([0o600, 0o755, 0o444, 0o555])
)
mkdir = st.tuples(st.just("mkdir"), st.sampled_from(PATHS), st.none())
link = st.tuples(st.just("link"), st.sampled_from(PATHS), st.sampled_from(["a.txt", "../out"]))
replace_by_dir = st.tuples(st.just("replace_by_dir"), st.sampled_from(PATHS), st.none())
OPERATION = write_file | shell_write | remove | chmod | mkdir | link | replace_by_dir


def command(kind: str, path: str, value: object) -> str:
    quoted = shlex.quote(path)
    parent = shlex.quote(str(Path(path).parent))
    if kind == "shell_write":
        octal = "".join(f"\\{byte:03o}" for byte in value)  # type: ignore[union-attr]
        return f"mkdir -p {parent} && printf '{octal}' > {quoted}"
    if kind == "remove":
        return f"rm -rf {quoted}"
    if kind == "chmod":
        return f"chmod {value:o} {quoted}"
    if kind == "mkdir":
        return f"mkdir -p {quoted}"
    if kind == "replace_by_dir":
        return f"rm -rf {quoted} && mkdir -p {quoted}/inner && printf i > {quoted}/inner/i"
    return f"mkdir -p {parent} && ln -sfn {shlex.quote(str(value))} {quoted}"


@settings(max_examples=60)
@given(st.lists(OPERATION, min_size=1, max_size=6))
def test_undo_step_by_step_restores_every_earlier_tree(
    operations: list[tuple[str, str, object]],
) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp) / "ws"
        (root / "d").mkdir(parents=True)
        (root / "a.txt").write_bytes(b"first\n")
        (root / "d" / "c.txt").write_bytes(b"\x00binary")
        # Modes no umask gives, so that a restore which loses one is seen.
        (root / "a.txt").chmod(0o640)
        (root / "d" / "c.txt").chmod(0o700)
        (root / "d").chmod(0o750)
        session = ToolSession(root, checkpoints=True)
        before: dict[int, object] = {}
        for index, (kind, path, value) in enumerate(operations):
            before[index] = tree(root)
            if kind == "write_file":
                session.call_sync("write_file", {"path": path, "content": value})
            else:
                session.call_sync("run_command", {"command": command(kind, path, value)})
        while (result := session.undo()).step is not None:
            assert result.applied, result.model_text()
            assert tree(root) == before[result.step], (result.step, result.files)
        assert tree(root) == before[0]
        assert session.checkpoints is not None
        session.checkpoints.close()
