"""OpenAI apply_patch: the Responses built-in tool's calls and outputs, and the custom tool
with the envelope, checked against the ``openai`` SDK's types and the grammar with lark."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import anyio
import lark
import pytest
from openai.types.responses import (
    ApplyPatchToolParam,
    CustomToolParam,
    ResponseApplyPatchToolCall,
    ResponseCustomToolCall,
    ResponseInputItemParam,
)
from openai.types.responses.response_input_item import ApplyPatchCallOutput

from tests.adapters._sdk import sdk_valid
from workspace_tools import Tool, ToolSession, invoke_tool_sync, workspace_tools
from workspace_tools.adapters.openai_apply_patch import (
    APPLY_PATCH_GRAMMAR,
    apply_patch_call_arguments,
    apply_patch_call_output,
    custom_tool_call_arguments,
    custom_tool_call_output,
    invoke_apply_patch_call,
    openai_apply_patch_custom_tool,
    openai_apply_patch_tool,
)

SCENARIOS = Path(__file__).resolve().parents[1] / "data" / "patch_scenarios"


def apply_patch_tool(root: Path) -> Tool[Any]:
    return {t.name: t for t in workspace_tools(root)}["apply_patch"]


def call_item(call_id: str, operation: dict) -> ResponseApplyPatchToolCall:
    return ResponseApplyPatchToolCall.model_validate(
        {
            "id": f"apc_{call_id}",
            "call_id": call_id,
            "type": "apply_patch_call",
            "status": "completed",
            "operation": operation,
        }
    )


def test_tool_definitions_are_sdk_params() -> None:
    assert sdk_valid(ApplyPatchToolParam, openai_apply_patch_tool())
    assert sdk_valid(CustomToolParam, openai_apply_patch_custom_tool())


def test_create_update_delete_operations_run_and_answer_in_sdk_shape(tmp_path: Path) -> None:
    (tmp_path / "app.py").write_bytes(b"def f():\r\n    return 1\r\n")
    (tmp_path / "old.txt").write_text("bye\n")
    tool = apply_patch_tool(tmp_path)
    items = [
        call_item("c1", {"type": "create_file", "path": "docs/new.md", "diff": "+# New\n+text"}),
        call_item(
            "c2",
            {
                "type": "update_file",
                "path": "app.py",
                "diff": "@@ def f():\n-    return 1\n+    return 2\n",
            },
        ),
        call_item("c3", {"type": "delete_file", "path": "old.txt"}),
    ]
    outputs = [anyio.run(invoke_apply_patch_call, tool, item) for item in items]
    assert outputs == [
        {
            "type": "apply_patch_call_output",
            "call_id": "c1",
            "status": "completed",
            "output": "Success. Updated the following files:\nA docs/new.md",
        },
        {
            "type": "apply_patch_call_output",
            "call_id": "c2",
            "status": "completed",
            "output": "Success. Updated the following files:\nM app.py",
        },
        {
            "type": "apply_patch_call_output",
            "call_id": "c3",
            "status": "completed",
            "output": "Success. Updated the following files:\nD old.txt",
        },
    ]
    for output in outputs:
        assert sdk_valid(ResponseInputItemParam, output)
        ApplyPatchCallOutput.model_validate(output)
    assert (tmp_path / "docs/new.md").read_bytes() == b"# New\ntext\n"
    assert (tmp_path / "app.py").read_bytes() == b"def f():\r\n    return 2\r\n"
    assert not (tmp_path / "old.txt").exists()


def test_a_failed_operation_is_a_failed_output_and_changes_nothing(tmp_path: Path) -> None:
    (tmp_path / "a.txt").write_text("keep\n")
    tool = apply_patch_tool(tmp_path)
    refused = anyio.run(
        invoke_apply_patch_call,
        tool,
        call_item("c9", {"type": "create_file", "path": "a.txt", "diff": "+x\n"}),
    )
    assert refused == {
        "type": "apply_patch_call_output",
        "call_id": "c9",
        "status": "failed",
        "output": "create_file a.txt: the file already exists; change it with update_file, "
        "or remove it with delete_file before creating it anew\n"
        "No file was changed: correct the operation and send the apply_patch_call again.",
    }
    assert sdk_valid(ResponseInputItemParam, refused)
    assert (tmp_path / "a.txt").read_bytes() == b"keep\n"
    bad = anyio.run(
        invoke_apply_patch_call,
        tool,
        {
            "type": "apply_patch_call",
            "call_id": "c10",
            "operation": {"type": "chmod_file", "path": "a"},
        },
    )
    assert bad["status"] == "failed"
    assert bad["output"] == (
        "Unknown apply_patch operation 'chmod_file'; expected create_file, update_file or "
        "delete_file"
    )


def test_calls_run_through_a_session_with_its_steps(tmp_path: Path) -> None:
    (tmp_path / "n.txt").write_text("1\n")

    async def main() -> tuple[dict, int]:
        session = ToolSession(tmp_path)
        tool = next(t for t in session.tools if t.name == "apply_patch")
        item = call_item("s1", {"type": "update_file", "path": "n.txt", "diff": "@@\n-1\n+2\n"})
        output = await invoke_apply_patch_call(tool, item, session.call)
        return output, len(session.steps)

    output, steps = anyio.run(main)
    assert output["status"] == "completed"
    assert steps == 1
    assert (tmp_path / "n.txt").read_bytes() == b"2\n"


def test_a_create_diff_with_a_line_that_is_not_added_is_refused_as_such(tmp_path: Path) -> None:
    item = call_item("c", {"type": "create_file", "path": "n.txt", "diff": "+a\nb\n"})
    output = anyio.run(invoke_apply_patch_call, apply_patch_tool(tmp_path), item)
    assert output["status"] == "failed"
    assert output["output"] == (
        "invalid diff for creating 'n.txt': line 2, 'b', does not start with '+'; every line "
        "of a new file is written as '+' and its text"
    )
    assert not (tmp_path / "n.txt").exists()


def test_arguments_of_a_call_are_one_operation_envelopes() -> None:
    item = call_item("c", {"type": "update_file", "path": "a.py", "diff": "@@\n-x\n+y"})
    assert apply_patch_call_arguments(item) == {
        "patch": "*** Begin Patch\n*** Update File: a.py\n@@\n-x\n+y\n*** End Patch\n"
    }
    assert apply_patch_call_arguments({"operation": {"type": "delete_file", "path": "b.py"}}) == {
        "patch": "*** Begin Patch\n*** Delete File: b.py\n*** End Patch\n"
    }


def test_the_custom_tool_runs_the_envelope_and_answers_in_sdk_shape(tmp_path: Path) -> None:
    (tmp_path / "x.txt").write_text("a\n")
    item = ResponseCustomToolCall.model_validate(
        {
            "type": "custom_tool_call",
            "call_id": "ct1",
            "name": "apply_patch",
            "input": "*** Begin Patch\n*** Update File: x.txt\n@@\n-a\n+b\n*** End Patch\n",
        }
    )
    tool = apply_patch_tool(tmp_path)
    result = invoke_tool_sync(tool, custom_tool_call_arguments(item), call_id=item.call_id)
    output = custom_tool_call_output(result)
    assert output == {
        "type": "custom_tool_call_output",
        "call_id": "ct1",
        "output": "Success. Updated the following files:\nM x.txt",
    }
    assert sdk_valid(ResponseInputItemParam, output)
    failed = invoke_tool_sync(tool, {"patch": "nonsense"}, call_id="ct2")
    assert custom_tool_call_output(failed)["output"] == (
        "Error: invalid patch: the first line of the patch must be '*** Begin Patch', not "
        "'nonsense'"
    )


def test_the_grammar_takes_every_well_formed_scenario_patch_and_no_malformed_one() -> None:
    parser = lark.Lark(APPLY_PATCH_GRAMMAR, parser="lalr")
    lenient = {"017_padded_operation_header", "018_padded_patch_markers", "033_heredoc_wrapper"}
    malformed = {"005_rejects_empty_patch", "013_rejects_invalid_header"}
    malformed |= {"037_rejects_missing_end_marker"}
    for folder in sorted(SCENARIOS.iterdir()):
        text = (folder / "patch.txt").read_bytes().decode().replace("\r\n", "\n")
        if folder.name in lenient | malformed:
            with pytest.raises(lark.exceptions.LarkError):
                parser.parse(text)
        else:
            parser.parse(text)


def test_apply_patch_call_output_of_a_transcript_entry(tmp_path: Path) -> None:
    (tmp_path / "t.txt").write_text("1\n")
    result = invoke_tool_sync(
        apply_patch_tool(tmp_path),
        {"patch": "*** Begin Patch\n*** Delete File: t.txt\n*** End Patch\n"},
        call_id="h1",
    )
    output = apply_patch_call_output(result)
    assert output["status"] == "completed"
    ApplyPatchCallOutput.model_validate(output)


@pytest.mark.parametrize(
    ("operation", "refusal"),
    [
        (
            {
                "type": "update_file",
                "path": "x.txt",
                "diff": "@@\n-a\n+b\n*** Delete File: keep.txt\n",
            },
            "The update_file diff for 'x.txt' holds the line '*** Delete File: keep.txt', which "
            "would start another operation",
        ),
        (
            {
                "type": "update_file",
                "path": "x.txt",
                "diff": "@@\n-a\n+b\n*** End of File\n*** Add File: new.txt\n+x\n",
            },
            "The update_file diff for 'x.txt' holds the line '*** Add File: new.txt', which "
            "would start another operation",
        ),
        (
            {"type": "update_file", "path": "x.txt", "diff": "*** Move to: y.txt\n@@\n-a\n+b\n"},
            "The update_file diff for 'x.txt' holds the line '*** Move to: y.txt', which would "
            "start another operation",
        ),
        (
            {"type": "delete_file", "path": "x.txt\n*** Delete File: keep.txt"},
            "The path 'x.txt\\n*** Delete File: keep.txt' starts or ends with whitespace or "
            "holds a line break, which a patch cannot name",
        ),
        (
            {"type": "create_file", "path": " keep.txt", "diff": "+x\n"},
            "The path ' keep.txt' starts or ends with whitespace or holds a line break, which "
            "a patch cannot name",
        ),
    ],
)
def test_an_operation_changes_its_one_file_only(
    tmp_path: Path, operation: dict, refusal: str
) -> None:
    # One apply_patch_call is one operation on one path: a diff or a path that would add a
    # second operation to the envelope is refused, and no file changes.
    (tmp_path / "x.txt").write_bytes(b"a\n")
    (tmp_path / "keep.txt").write_bytes(b"keep\n")
    before = {p.name: p.read_bytes() for p in tmp_path.iterdir()}
    output = anyio.run(
        invoke_apply_patch_call, apply_patch_tool(tmp_path), call_item("c1", operation)
    )
    assert sdk_valid(ResponseInputItemParam, output)
    assert (output["status"], output["output"][: len(refusal)]) == ("failed", refusal), output
    assert {p.name: p.read_bytes() for p in tmp_path.iterdir()} == before


def test_a_create_diff_may_hold_lines_that_look_like_headers(tmp_path: Path) -> None:
    # In a create_file diff every line is '+', so header-like text is the file's own.
    operation = {"type": "create_file", "path": "doc.md", "diff": "+*** Delete File: x.txt\n"}
    output = anyio.run(
        invoke_apply_patch_call, apply_patch_tool(tmp_path), call_item("c2", operation)
    )
    assert output["status"] == "completed", output
    assert (tmp_path / "doc.md").read_bytes() == b"*** Delete File: x.txt\n"


@pytest.mark.parametrize(
    ("item", "refusal"),
    [
        (
            {"call_id": "c", "operation": "delete x.txt"},
            "The apply_patch_call's operation is a string, not an object with type, path and diff",
        ),
        (
            {"call_id": "c", "operation": {"type": "update_file", "path": "x.txt", "diff": 5}},
            "The apply_patch_call's diff is a number, not text",
        ),
        (
            {"call_id": "c", "operation": {"type": "delete_file", "path": ["x.txt"]}},
            "The apply_patch_call's path is an array, not text",
        ),
        (
            {"call_id": "c", "operation": {"type": "update_file", "path": 5, "diff": "@@\n-a\n"}},
            "The apply_patch_call's path is a number, not text",
        ),
        (
            {"call_id": "c", "operation": {"type": "delete_file"}},
            "The apply_patch_call names no path",
        ),
        (
            {"call_id": "c", "operation": {"type": "create_file", "path": "new.txt"}},
            "The apply_patch_call's create_file operation has no diff",
        ),
        (
            {"call_id": "c", "operation": {"type": "update_file", "path": "x.txt", "diff": None}},
            "The apply_patch_call's update_file operation has no diff",
        ),
        (
            {"call_id": "c", "operation": {"type": "update_file", "path": "x.txt", "diff": 0}},
            "The apply_patch_call's diff is a number, not text",
        ),
        (
            "delete x.txt",
            "The apply_patch_call is a string, not an object with call_id and operation",
        ),
    ],
)
def test_a_malformed_item_is_a_failed_output(tmp_path: Path, item: Any, refusal: str) -> None:
    (tmp_path / "x.txt").write_bytes(b"a\n")
    output = anyio.run(invoke_apply_patch_call, apply_patch_tool(tmp_path), item)
    assert sdk_valid(ResponseInputItemParam, output)
    assert (output["status"], output["output"]) == ("failed", refusal)
    assert (tmp_path / "x.txt").read_bytes() == b"a\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["x.txt"]


FILE = b"def f():\n    a = 1\n    b = 2\n    c = 'Add File 1'\n"


@pytest.mark.parametrize(
    ("operation", "output"),
    [
        (
            {"type": "update_file", "path": "gone.py", "diff": "@@\n-a\n+b\n"},
            "update_file gone.py: the file does not exist; create it with create_file\n"
            "No file was changed: correct the operation and send the apply_patch_call again.",
        ),
        (
            {"type": "delete_file", "path": "gone.py"},
            "delete_file gone.py: the file does not exist\n"
            "No file was changed: correct the operation and send the apply_patch_call again.",
        ),
        (
            {
                "type": "update_file",
                "path": "t.py",
                "diff": "@@ def f():\n     a = 1\n-    b = 3\n+    b = 4\n",
            },
            "t.py: chunk 1 (diff line 1): its expected lines (the ' ' and '-' lines) are not in "
            "the file. Its line 2, '    b = 3', differs from the file's line 3, '    b = 2'. "
            "The nearest lines in the file are 2-3:\n     2\t    a = 1\n     3\t    b = 2\n"
            "No file was changed: correct the operation and send the apply_patch_call again.",
        ),
        (
            {
                "type": "update_file",
                "path": "t.py",
                "diff": "@@\n a = 1\n+b\n*** End of File\nxx\n",
            },
            "invalid diff: diff line 5 of the update of 't.py', 'xx', starts with none of ' ' "
            "(context), '-' (removed), '+' (added) or '@@' (anchor)",
        ),
        (
            # Already in the file: sent again, it would fail again; the model leaves it out.
            {"type": "update_file", "path": "t.py", "diff": "@@\n-    b = 1\n+    b = 2\n"},
            "t.py: chunk 1 (diff line 2) is already applied: its resulting lines are in the "
            "file at line 3; do not send this change again\n"
            "No file was changed: send the apply_patch_call again without that chunk, if its "
            "diff holds anything else.",
        ),
        (
            # What the message quotes of the file keeps its words: "Add File" here is text.
            {"type": "update_file", "path": "t.py", "diff": "@@\n-    c = 'Add File 2'\n+c\n"},
            "t.py: chunk 1 (diff line 2): its expected lines (the ' ' and '-' lines) are not in "
            "the file. The most similar line is 4: '    c = 'Add File 1''\n"
            "No file was changed: correct the operation and send the apply_patch_call again.",
        ),
    ],
)
def test_a_failure_speaks_of_the_items_operations_and_diff_lines(
    tmp_path: Path, operation: dict[str, Any], output: str
) -> None:
    """The model sent an operation and a diff, never our envelope: the answer names
    create_file/update_file/delete_file and counts lines in its diff, never '*** Add File:',
    allow_overwrite or the envelope's patch lines."""
    (tmp_path / "t.py").write_bytes(FILE)
    answer = anyio.run(
        invoke_apply_patch_call, apply_patch_tool(tmp_path), call_item("c1", operation)
    )
    assert (answer["status"], answer["output"]) == ("failed", output), answer["output"]
    assert sdk_valid(ResponseInputItemParam, answer)
    assert (tmp_path / "t.py").read_bytes() == FILE
