"""run_command's declared output schema describes every result it returns, as an MCP
client validates ``structuredContent`` against it (with ``jsonschema``, the reference
implementation the official MCP client uses); and the pipeline refuses content with fields
a tool's declared schema forbids, so no tool can drift from its schema unnoticed, while a
schema that does not forbid other keys lets them through, as a client would."""

from __future__ import annotations

import secrets
from pathlib import Path
from typing import Any

import jsonschema
import pytest
from pydantic import BaseModel, ConfigDict

from tests._processes import survivors
from workspace_tools import ErrorCode, invoke_tool, tool
from workspace_tools.adapters.mcp import mcp_result, mcp_tool
from workspace_tools.tools import workspace_tools

pytestmark = pytest.mark.anyio

UNTIL_SLEEPING = 'until [ "$(cat /proc/$!/comm 2>/dev/null)" = sleep ]; do :; done'


def check(schema: dict[str, Any], content: object) -> None:
    validator = jsonschema.Draft202012Validator(schema)
    validator.check_schema(schema)
    errors = [error.message for error in validator.iter_errors(content)]
    assert errors == [], f"{content!r} against {schema!r}: {errors}"


@pytest.mark.parametrize(
    ("command", "keys"),
    [
        ("echo out; echo err >&2; exit 3", ["exit_code", "stdout", "stderr"]),
        (
            f"sleep 1000 & {UNTIL_SLEEPING}; echo started",
            ["exit_code", "stdout", "stderr", "note"],
        ),
    ],
    ids=["without-note", "with-note"],
)
async def test_every_result_validates_against_the_declared_output_schema(
    tmp_path: Path, command: str, keys: list[str]
) -> None:
    marker = f"WT_TEST_MARKER={secrets.token_hex(12)}"
    run = next(t for t in workspace_tools(tmp_path) if t.name == "run_command")
    result = await invoke_tool(run, {"command": f"export {marker}; {command}"})
    assert result.error is None, result.error
    assert list(result.content) == keys
    declared = mcp_tool(run).outputSchema
    assert declared is not None
    assert declared == run.output_json_schema()
    check(declared, result.content)
    # What an MCP client receives and validates: structuredContent.
    structured = mcp_result(result).structuredContent
    assert structured == result.content
    check(declared, structured)
    assert survivors(marker) == []


def test_the_declared_schema_lists_the_note_as_optional(tmp_path: Path) -> None:
    run = next(t for t in workspace_tools(tmp_path) if t.name == "run_command")
    schema = run.output_json_schema()
    assert schema is not None
    assert sorted(schema["properties"]) == ["exit_code", "note", "stderr", "stdout"]
    assert schema["required"] == ["exit_code", "stdout", "stderr"]
    check(schema, {"exit_code": 0, "stdout": "", "stderr": "", "note": "stopped"})
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate({"exit_code": 0, "stdout": "", "stderr": "", "note": 7}, schema)


class Declared(BaseModel):
    model_config = ConfigDict(extra="forbid")  # additionalProperties: false

    path: str


class Undeclared(Declared):
    extra: int


class Args(BaseModel):
    kind: str


def _content(args: Args, context: object) -> object:
    if args.kind == "subclass":
        return Undeclared(path="a", extra=1)
    if args.kind == "dict":
        return {"path": "a", "extra": 1}
    if args.kind == "model":
        return Declared(path="a")
    return {"path": "a"}


DRIFTING = tool(
    name="drifting",
    description="returns content with and without fields its schema lacks",
    parameters=Args,
    execute=_content,
    output_schema=Declared,
)


@pytest.mark.parametrize(
    ("kind", "why"),
    [
        ("subclass", "'extra': not in the declared output schema"),
        ("dict", "extra: Extra inputs are not permitted"),
    ],
)
async def test_content_with_fields_the_schema_forbids_is_a_tool_error(kind: str, why: str) -> None:
    result = await invoke_tool(DRIFTING, {"kind": kind})
    assert (result.error_code, result.error) == (
        ErrorCode.TOOL_ERROR,
        f"drifting returned content that does not match its output schema: {why}",
    )
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate({"path": "a", "extra": 1}, Declared.model_json_schema())


class Lenient(BaseModel):
    path: str


class LenientMore(Lenient):
    extra: int


def _lenient_content(args: Args, context: object) -> object:
    if args.kind == "subclass":
        return LenientMore(path="a", extra=1)
    return {"path": "a", "extra": 1}


@pytest.mark.parametrize("kind", ["subclass", "dict"])
async def test_a_schema_that_does_not_forbid_other_keys_passes_them(kind: str) -> None:
    lenient = tool(
        name="lenient",
        description="returns more keys than its schema lists, which does not forbid them",
        parameters=Args,
        execute=_lenient_content,
        output_schema=Lenient,
    )
    result = await invoke_tool(lenient, {"kind": kind})
    assert (result.error, result.content) == (None, {"path": "a", "extra": 1})
    check(Lenient.model_json_schema(), result.content)


@pytest.mark.parametrize("kind", ["model", "plain-dict"])
async def test_content_the_schema_describes_passes(kind: str) -> None:
    result = await invoke_tool(DRIFTING, {"kind": kind})
    assert (result.error, result.content) == (None, {"path": "a"})
    check(Declared.model_json_schema(), result.content)
