"""``apply_patch_call`` operations run by us and by openai-agents' own workspace editor
(``agents.sandbox.apply_patch.WorkspaceEditor`` over a ``UnixLocalSandboxClient`` session):
the same trees where both succeed, a failure in both where it fails, with each one's text
pinned side by side, and the output items valid for the ``openai`` SDK's type."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import anyio
import pytest
from agents.editor import ApplyPatchOperation
from agents.run_internal.tool_actions import format_shell_error
from agents.sandbox.apply_patch import WorkspaceEditor
from agents.sandbox.manifest import Manifest
from agents.sandbox.sandboxes.unix_local import UnixLocalSandboxClient
from openai.types.responses.response_input_item import ApplyPatchCallOutput

from tests.probe5._oracle import said_in_readme
from workspace_tools import workspace_tools
from workspace_tools.adapters.openai_apply_patch import invoke_apply_patch_call

Tree = dict[str, bytes]
BEFORE: Tree = {"a.txt": b"x\ny\n", "src/m.py": b"def f():\n    return 1\n"}
AGAIN = "\nNo file was changed: correct the operation and send the apply_patch_call again."


def write(root: Path, tree: Tree) -> None:
    for rel, data in tree.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_bytes(data)


def read(root: Path) -> Tree:
    return {str(p.relative_to(root)): p.read_bytes() for p in root.rglob("*") if p.is_file()}


def theirs(root: Path, operation: dict[str, Any]) -> tuple[str, str]:
    """Run ``operation`` with the SDK's editor on ``root``: ``(status, output)`` as its
    runner reports them (an exception is ``failed`` with its text)."""

    async def main() -> tuple[str, str]:
        session = await UnixLocalSandboxClient().create(manifest=Manifest(root=str(root)))
        async with session:
            editor = WorkspaceEditor(session)
            try:
                result = await editor.apply_operation(ApplyPatchOperation(**operation))
            except Exception as exc:
                # Its decoding error names the host path: shown relative, as ours.
                return "failed", format_shell_error(exc).replace(f"{root}/", "")
            return "completed", result.output or ""

    return anyio.run(main)


def ours(root: Path, operation: dict[str, Any]) -> tuple[str, str]:
    tool = {t.name: t for t in workspace_tools(root)}["apply_patch"]
    item = {"type": "apply_patch_call", "call_id": "c1", "operation": operation}
    output = anyio.run(invoke_apply_patch_call, tool, item)
    ApplyPatchCallOutput.model_validate(output)
    return output["status"], output["output"]


def both(tmp_path: Path, operation: dict[str, Any]) -> tuple[tuple[str, str, Tree], ...]:
    results = []
    for name, run in (("theirs", theirs), ("ours", ours)):
        root = tmp_path / name
        root.mkdir()
        write(root, BEFORE)
        status, output = run(root, operation)
        results.append((status, output, read(root)))
    return tuple(results)


@pytest.mark.parametrize(
    ("operation", "tree"),
    [
        (
            {"type": "update_file", "path": "a.txt", "diff": "@@\n-x\n+X\n"},
            {**BEFORE, "a.txt": b"X\ny\n"},
        ),
        (
            {
                "type": "update_file",
                "path": "src/m.py",
                "diff": "@@ def f():\n-    return 1\n+    return 2\n",
            },
            {**BEFORE, "src/m.py": b"def f():\n    return 2\n"},
        ),
        (
            {"type": "create_file", "path": "new/dir/n.txt", "diff": "+z\n+w"},
            None,  # see test_create_file_ends_its_last_line_where_the_sdk_leaves_it_open
        ),
        ({"type": "delete_file", "path": "a.txt"}, {"src/m.py": BEFORE["src/m.py"]}),
    ],
)
def test_successful_operations_leave_the_sdk_editors_tree(
    tmp_path: Path, operation: dict[str, Any], tree: Tree | None
) -> None:
    (status_t, _, tree_t), (status_o, _, tree_o) = both(tmp_path, operation)
    assert status_t == status_o == "completed"
    if tree is None:  # a created file: theirs leaves its last line without a break
        assert tree_o == {**tree_t, "new/dir/n.txt": tree_t["new/dir/n.txt"] + b"\n"}
        return
    assert tree_t == tree_o == tree


#: Each failure kind: the operation, the SDK editor's text, and ours (what a model reads).
FAILURES = {
    "update of a missing file": (
        {"type": "update_file", "path": "nope.txt", "diff": "@@\n-a\n+b\n"},
        "apply_patch missing file: nope.txt",
        "update_file nope.txt: the file does not exist; create it with create_file" + AGAIN,
    ),
    "delete of a missing file": (
        {"type": "delete_file", "path": "nope.txt"},
        "apply_patch missing file: nope.txt",
        "delete_file nope.txt: the file does not exist" + AGAIN,
    ),
    "create over an existing file": (
        {"type": "create_file", "path": "a.txt", "diff": "+z\n"},
        "apply_patch cannot create a.txt because it already exists. Use an update_file "
        "operation to change an existing file.",
        "create_file a.txt: the file already exists; change it with update_file, or remove "
        "it with delete_file before creating it anew" + AGAIN,
    ),
    "context not found": (
        {"type": "update_file", "path": "a.txt", "diff": "@@\n-zz\n+b\n"},
        "Invalid Context 0:\nzz",
        "a.txt: chunk 1 (diff line 2): its expected lines (the ' ' and '-' lines) are not in "
        "the file. None of its lines is in the file: read the file again and copy its lines "
        "exactly" + AGAIN,
    ),
    "line of no kind": (
        {"type": "update_file", "path": "a.txt", "diff": "@@\nbad\n"},
        "Invalid Line: bad",
        "invalid diff: diff line 2 of the update of 'a.txt', 'bad', starts with none of ' ' "
        "(context), '-' (removed), '+' (added) or '@@' (anchor)",
    ),
    "path outside the root": (
        {"type": "update_file", "path": "../x.txt", "diff": "@@\n-a\n+b\n"},
        "apply_patch path must not escape root: ../x.txt",
        "Path '../x.txt' is outside the workspace root; use a path inside it",
    ),
}


@pytest.mark.parametrize(
    ("operation", "their_text", "our_text"), FAILURES.values(), ids=FAILURES.keys()
)
def test_each_failure_fails_in_both_and_changes_nothing(
    tmp_path: Path, operation: dict[str, Any], their_text: str, our_text: str
) -> None:
    (status_t, text_t, tree_t), (status_o, text_o, tree_o) = both(tmp_path, operation)
    assert (status_t, text_t, tree_t) == ("failed", their_text, BEFORE)
    assert (status_o, text_o, tree_o) == ("failed", our_text, BEFORE)


def test_a_file_the_sdk_cannot_decode_is_patched_in_its_own_encoding(tmp_path: Path) -> None:
    operation = {"type": "update_file", "path": "l.txt", "diff": "@@\n-caf\u00e9\n+bar\n"}
    results = []
    for name, run in (("theirs", theirs), ("ours", ours)):
        root = tmp_path / name
        root.mkdir()
        (root / "l.txt").write_bytes("caf\u00e9\n".encode("latin-1"))
        results.append((*run(root, operation), (root / "l.txt").read_bytes()))
    assert results == [
        ("failed", "apply_patch could not decode file: l.txt", b"caf\xe9\n"),
        ("completed", "Success. Updated the following files:\nM l.txt", b"bar\n"),
    ]
    said_in_readme("**Kept per file:** encoding and BOM")
