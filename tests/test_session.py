"""ToolSession: steps, skips, cache, confirmation and the record, on asyncio and trio."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import anyio
import pytest
from pydantic import BaseModel, model_validator
from session_tools import session_tools

from tests._waiting import DEADLINE
from workspace_tools import (
    ArgumentCondition,
    Confirmation,
    ConfirmationRequest,
    ErrorCode,
    Policy,
    PolicyRule,
    SessionRecord,
    ToolContext,
    ToolPresentation,
    ToolSession,
    Workspace,
    tool,
    workspace_tools,
)

pytestmark = pytest.mark.anyio

POLICY = Policy(
    rules=(
        PolicyRule(
            name="no-rm",
            decision="deny",
            tools=("run_command",),
            when=(ArgumentCondition(argument="command", pattern=r"\brm\b"),),
            reason="deleting files is not allowed",
        ),
        PolicyRule(
            name="ask-outside-src",
            decision="ask",
            tools=("write_file", "edit_file"),
            when=(ArgumentCondition(argument="path", glob="src/**", negate=True),),
        ),
    )
)


@pytest.fixture(autouse=True)
def _clock(clock_moved_on: None) -> None:
    """These tests are about what a cache key sees, not about the clock (see
    test_a_tree_changed_within_the_clock_tick_has_no_fingerprint)."""


def make_session(
    root: Path, confirm: Any = None, policy: Policy = POLICY, runs: list[str] | None = None
) -> ToolSession:
    workspace = Workspace(root)
    return ToolSession(
        session_tools(workspace, runs), workspace=workspace, policy=policy, confirm=confirm
    )


@pytest.fixture
def root(tmp_path: Path) -> Path:
    (tmp_path / "src").mkdir()
    (tmp_path / "src" / "app.py").write_text("print(1)\nprint('done')\n", encoding="utf-8")
    return tmp_path


def steps_of(session: ToolSession) -> list[dict[str, Any]]:
    return [step.model_dump() for step in session.steps]


def step(index: int, tool_name: str, input: Any, result: str, **flags: Any) -> dict[str, Any]:
    base = {
        "index": index,
        "tool": tool_name,
        "input": input,
        "result": result,
        "skipped": False,
        "skip_reason": None,
        "denied_by": None,
        "cached": False,
        "failed": False,
        "changed_files": None,
    }
    return {**base, **flags}


READ_APP = {"path": "src/app.py", "offset": 1, "limit": None}
APP_LINES = "1\tprint(1)\n2\tprint('done')\n"


async def test_scripted_session_records_every_kind_of_step(root: Path) -> None:
    answers = iter(
        [
            Confirmation(approved=False, reason="keep notes out of the repo"),
            Confirmation(approved=True),
        ]
    )
    asked: list[str] = []

    async def confirm(request: ConfirmationRequest) -> Confirmation:
        asked.append(request.call_id)
        return next(answers)

    runs: list[str] = []
    session = make_session(root, confirm, runs=runs)
    script: list[tuple[str, Any]] = [
        ("read_file", {"path": "src/app.py"}),
        ("read_file", '{"path": "src/app.py", "offset": 1}'),
        ("read_file", {"offset": 2}),
        ("run_command", {"command": "rm -rf src"}),
        ("write_file", {"path": "notes.md", "content": "hi\n"}),
        ("edit_file", {"path": "src/app.py", "old_text": "print(1)", "new_text": "print(2)"}),
        ("read_file", {"path": "src/app.py"}),
        ("edit_file", {"path": "src/app.py", "old_text": "absent", "new_text": "x"}),
        ("read_file", {"path": "src/app.py", "limit": "many"}),
        ("write_file", {"path": "notes.md", "content": "hi\n"}),
    ]
    results = [
        await session.call(name, arguments, call_id=f"c{i}")
        for i, (name, arguments) in enumerate(script)
    ]

    edit_input = {"path": "src/app.py", "old_text": "print(1)", "new_text": "print(2)"}
    notes_input = {"path": "notes.md", "content": "hi\n"}
    assert steps_of(session) == [
        step(0, "read_file", READ_APP, APP_LINES),
        step(1, "read_file", READ_APP, APP_LINES, cached=True),
        step(
            2,
            "read_file",
            {"offset": 2},
            "Not run: read_file needs the required argument path. "
            "Call it again with every required argument.",
            skipped=True,
            skip_reason="missing",
        ),
        step(
            3,
            "run_command",
            {"command": "rm -rf src"},
            "Not run: policy rule 'no-rm' denies this run_command call: "
            "deleting files is not allowed",
            skipped=True,
            skip_reason="policy",
            denied_by="no-rm",
        ),
        step(
            4,
            "write_file",
            notes_input,
            "Not run: the user declined this write_file call: keep notes out of the repo",
            skipped=True,
            skip_reason="confirmation",
            denied_by="ask-outside-src",
        ),
        step(5, "edit_file", edit_input, '{"path":"src/app.py","replacements":1}'),
        step(6, "read_file", READ_APP, "1\tprint(2)\n2\tprint('done')\n"),
        step(
            7,
            "edit_file",
            {"path": "src/app.py", "old_text": "absent", "new_text": "x"},
            "No match for old_text in src/app.py",
            failed=True,
        ),
        step(
            8,
            "read_file",
            {"path": "src/app.py", "limit": "many"},
            "Invalid arguments for read_file:\n- limit: Input should be a valid integer, "
            "unable to parse string as an integer",
            failed=True,
        ),
        step(9, "write_file", notes_input, '{"path":"notes.md","created":true}'),
    ]
    assert runs == ["read_file", "edit_file", "read_file", "edit_file", "write_file"]
    assert asked == ["c4", "c9"]
    assert [r.call_id for r in results] == [f"c{i}" for i in range(10)]
    assert [r.error_code for r in results] == [
        None,
        None,
        ErrorCode.INVALID_ARGUMENTS,
        ErrorCode.PERMISSION_DENIED,
        ErrorCode.PERMISSION_DENIED,
        None,
        None,
        ErrorCode.NO_MATCH,
        ErrorCode.INVALID_ARGUMENTS,
        None,
    ]
    assert [r.model_text() for r in results] == [s.result for s in session.steps]
    assert (root / "notes.md").read_text(encoding="utf-8") == "hi\n"

    kinds = [(e.step, e.type) for e in session.trace]
    assert kinds == [
        (0, "call"), (0, "policy"), (0, "tool"),
        (1, "call"), (1, "policy"), (1, "cache"),
        (2, "call"),
        (3, "call"), (3, "policy"),
        (4, "call"), (4, "policy"), (4, "confirm"),
        (5, "call"), (5, "policy"), (5, "tool"),
        (6, "call"), (6, "policy"), (6, "tool"),
        (7, "call"), (7, "policy"), (7, "tool"),
        (8, "call"),
        (9, "call"), (9, "policy"), (9, "confirm"), (9, "tool"),
    ]  # fmt: skip
    confirms = [(e.approved, e.reason) for e in session.trace if e.type == "confirm"]
    assert confirms == [(False, "keep notes out of the repo"), (True, None)]
    assert [e.from_step for e in session.trace if e.type == "cache"] == [0]
    assert all(e.ms >= 0 for e in session.trace if e.type in ("tool", "confirm"))
    stamps = [e.at_ms for e in session.trace]
    assert stamps == sorted(stamps)

    assert [(r.label, r.detail, r.state, r.note) for r in session.summary()] == [
        ("Read file", "src/app.py", "ran", None),
        ("Read file", "src/app.py", "cached", None),
        ("Read file", None, "missing", None),
        ("Run command", "rm -rf src", "denied", "no-rm"),
        ("Write file", "notes.md", "declined", "ask-outside-src"),
        ("Edit file", "src/app.py", "ran", None),
        ("Read file", "src/app.py", "ran", None),
        ("Edit file", "src/app.py", "failed", None),
        ("Read file", "src/app.py", "failed", None),
        ("Write file", "notes.md", "ran", None),
    ]

    record = session.record()
    assert SessionRecord.model_validate_json(record.model_dump_json()) == record


async def test_summary_renders_aligned_lines(root: Path) -> None:
    session = make_session(root)
    await session.call("read_file", {"path": "src/app.py"})
    await session.call("run_command", {"command": "rm -rf  src\nsecond line"})
    await session.call("read_file", {})
    assert session.render_summary() == (
        "  0  Read file    ran      src/app.py\n"
        "  1  Run command  denied   rm -rf src second line  [no-rm]\n"
        "  2  Read file    missing"
    )


async def test_edit_through_the_session_invalidates_a_cached_read(root: Path) -> None:
    runs: list[str] = []
    session = make_session(root, runs=runs)
    first = await session.call("read_file", {"path": "src/app.py"})
    await session.call("edit_file", {"path": "src/app.py", "old_text": "done", "new_text": "over"})
    second = await session.call("read_file", {"path": "src/app.py"})
    assert first.model_text() == APP_LINES
    assert second.model_text() == "1\tprint(1)\n2\tprint('over')\n"
    assert [s.cached for s in session.steps] == [False, False, False]
    assert runs == ["read_file", "edit_file", "read_file"]


async def test_any_non_read_only_call_invalidates_even_when_it_changes_nothing(
    root: Path,
) -> None:
    runs: list[str] = []
    session = make_session(root, runs=runs)
    await session.call("read_file", {"path": "src/app.py"})
    await session.call("run_command", {"command": "true"})
    await session.call("read_file", {"path": "src/app.py"})
    assert [s.cached for s in session.steps] == [False, False, False]
    assert runs == ["read_file", "run_command", "read_file"]


def _rewrite_same_size_keep_mtime(path: Path) -> None:
    before = path.stat()
    with open(path, "r+b") as handle:
        handle.write(b"PRINT")
    os.utime(path, ns=(before.st_atime_ns, before.st_mtime_ns))


def _replace_by_rename(path: Path) -> None:
    temp = path.with_name("new.tmp")
    temp.write_text("print(1)\nprint('DONE')\n", encoding="utf-8")
    os.replace(temp, path)


OUTSIDE_CHANGES = {
    "rewrite-same-size-mtime-restored": _rewrite_same_size_keep_mtime,
    "replace-by-rename": _replace_by_rename,
    "append": lambda p: p.write_text(p.read_text() + "more\n"),
    "delete": lambda p: p.unlink(),
}


@pytest.mark.parametrize("change", OUTSIDE_CHANGES.values(), ids=OUTSIDE_CHANGES.keys())
async def test_outside_change_to_the_file_invalidates_a_cached_read(root: Path, change) -> None:
    runs: list[str] = []
    session = make_session(root, runs=runs)
    await session.call("read_file", {"path": "src/app.py"})
    change(root / "src" / "app.py")
    again = await session.call("read_file", {"path": "src/app.py"})
    assert runs == ["read_file", "read_file"]
    assert session.steps[1].cached is False
    expected = (root / "src" / "app.py").read_text() if (root / "src" / "app.py").exists() else None
    if expected is None:
        assert again.error_code == ErrorCode.NOT_FOUND
    else:
        assert again.model_text() == "".join(
            f"{i}\t{line}\n" for i, line in enumerate(expected.splitlines(), 1)
        )


async def test_touch_without_a_content_change_keeps_the_cached_read(root: Path) -> None:
    runs: list[str] = []
    session = make_session(root, runs=runs)
    await session.call("read_file", {"path": "src/app.py"})
    os.utime(root / "src" / "app.py", ns=(1, 1))
    await session.call("read_file", {"path": "src/app.py"})
    assert runs == ["read_file"]
    assert [s.cached for s in session.steps] == [False, True]


def _add_file(root: Path) -> None:
    (root / "src" / "new.py").write_text("", encoding="utf-8")


def _add_nested_file(root: Path) -> None:
    (root / "src" / "pkg").mkdir()
    (root / "src" / "pkg" / "mod.py").write_text("", encoding="utf-8")


def _change_gitignore(root: Path) -> None:
    (root / ".gitignore").write_text("*.log\n", encoding="utf-8")


def _rewrite_listed_file(root: Path) -> None:
    _rewrite_same_size_keep_mtime(root / "src" / "app.py")


TREE_CHANGES = {
    "add-file": _add_file,
    "add-nested-file": _add_nested_file,
    "ancestor-gitignore": _change_gitignore,
    "rewrite-same-size": _rewrite_listed_file,
    "remove-file": lambda root: (root / "src" / "app.py").unlink(),
}


@pytest.mark.parametrize("change", TREE_CHANGES.values(), ids=TREE_CHANGES.keys())
async def test_outside_change_in_the_tree_invalidates_a_cached_listing(root: Path, change) -> None:
    runs: list[str] = []
    session = make_session(root, runs=runs)
    arguments = {"path": "src", "recursive": True}
    await session.call("list_files", arguments)
    await session.call("list_files", arguments)
    change(root)
    await session.call("list_files", arguments)
    assert [s.cached for s in session.steps] == [False, True, False]
    assert runs == ["list_files", "list_files"]


async def test_change_outside_the_listed_directory_keeps_the_cached_listing(root: Path) -> None:
    runs: list[str] = []
    session = make_session(root, runs=runs)
    await session.call("list_files", {"path": "src"})
    (root / "other.txt").write_text("x", encoding="utf-8")
    await session.call("list_files", {"path": "src"})
    assert [s.cached for s in session.steps] == [False, True]


async def test_invalidate_cache_forgets_cached_results(root: Path) -> None:
    runs: list[str] = []
    session = make_session(root, runs=runs)
    await session.call("read_file", {"path": "src/app.py"})
    session.invalidate_cache()
    await session.call("read_file", {"path": "src/app.py"})
    assert runs == ["read_file", "read_file"]


async def test_failed_read_is_not_cached(root: Path) -> None:
    runs: list[str] = []
    session = make_session(root, runs=runs)
    await session.call("read_file", {"path": "absent.txt"})
    await session.call("read_file", {"path": "absent.txt"})
    assert runs == ["read_file", "read_file"]
    assert [(s.failed, s.cached) for s in session.steps] == [(True, False), (True, False)]


async def test_invalid_write_does_not_invalidate_the_cache(root: Path) -> None:
    runs: list[str] = []
    session = make_session(root, runs=runs)
    await session.call("read_file", {"path": "src/app.py"})
    await session.call("write_file", {"path": "src/app.py", "content": 5})
    await session.call("read_file", {"path": "src/app.py"})
    assert runs == ["read_file"]
    assert [(s.failed, s.cached) for s in session.steps] == [
        (False, False),
        (True, False),
        (False, True),
    ]


async def test_confirmation_callback_sees_the_call_and_its_presentation(root: Path) -> None:
    seen: list[ConfirmationRequest] = []

    def confirm(request: ConfirmationRequest) -> bool:
        seen.append(request)
        return True

    session = make_session(root, confirm)
    result = await session.call(
        "write_file", {"path": "docs/../notes.md", "content": "x"}, call_id="w1"
    )
    assert seen == [
        ConfirmationRequest(
            call_id="w1",
            tool="write_file",
            arguments={"path": "docs/../notes.md", "content": "x"},
            presentation=ToolPresentation(
                label="Write file", icon="file-plus", detail="docs/../notes.md"
            ),
            read_only=False,
            rule="ask-outside-src",
        )
    ]
    assert result.error is None
    assert [e.approved for e in session.trace if e.type == "confirm"] == [True]


@pytest.mark.parametrize(
    ("answer", "reason"),
    [
        (False, "Not run: the user declined this write_file call."),
        (
            Confirmation(approved=False, reason="not now"),
            "Not run: the user declined this write_file call: not now",
        ),
    ],
)
async def test_declined_call_does_not_run(root: Path, answer: Any, reason: str) -> None:
    runs: list[str] = []
    session = make_session(root, lambda request: answer, runs=runs)
    result = await session.call("write_file", {"path": "notes.md", "content": "x"})
    assert runs == []
    assert not (root / "notes.md").exists()
    assert result.model_text() == reason
    assert result.details == {
        "skipped": True,
        "skip_reason": "confirmation",
        "denied_by": "ask-outside-src",
    }


async def test_confirmation_callback_that_raises_declines(root: Path) -> None:
    def confirm(request: ConfirmationRequest) -> bool:
        raise RuntimeError("terminal closed")

    session = make_session(root, confirm)
    result = await session.call("write_file", {"path": "notes.md", "content": "x"})
    assert result.model_text() == (
        "Not run: the user declined this write_file call: the confirmation failed (terminal closed)"
    )
    assert not (root / "notes.md").exists()


async def test_ask_without_a_callback_is_a_policy_denial(root: Path) -> None:
    session = make_session(root)
    result = await session.call("write_file", {"path": "notes.md", "content": "x"})
    assert result.model_text() == (
        "Not run: write_file needs confirmation (policy rule 'ask-outside-src') and nobody "
        "can confirm calls in this session."
    )
    assert (session.steps[0].skip_reason, session.steps[0].denied_by) == (
        "policy",
        "ask-outside-src",
    )
    assert [e.type for e in session.trace] == ["call", "policy"]


async def test_failed_step_after_a_write_leaves_the_write_in_place(root: Path) -> None:
    session = make_session(root)
    await session.call("write_file", {"path": "src/new.py", "content": "x = 1\n"})
    failed = await session.call("run_command", {"command": "cat missing-file"})
    broken = await session.call(
        "edit_file", {"path": "src/new.py", "old_text": "y = 2", "new_text": "y = 3"}
    )
    assert (root / "src" / "new.py").read_text(encoding="utf-8") == "x = 1\n"
    assert json.loads(failed.model_text())["exit_code"] == 1
    assert broken.error_code == ErrorCode.NO_MATCH
    assert [(s.tool, s.skipped, s.failed) for s in session.steps] == [
        ("write_file", False, False),
        ("run_command", False, False),
        ("edit_file", False, True),
    ]
    assert session.steps[0].result == '{"path":"src/new.py","created":true}'


@pytest.mark.parametrize(
    ("arguments", "missing"),
    [
        ({}, "arguments path, content"),
        ({"content": "x"}, "argument path"),
        ({"content": 5}, "argument path"),
        ('{"content": "x"}', "argument path"),
        (None, "arguments path, content"),
    ],
)
async def test_missing_required_arguments_skip_the_call(
    root: Path, arguments: Any, missing: str
) -> None:
    runs: list[str] = []
    session = make_session(root, runs=runs)
    result = await session.call("write_file", arguments)
    assert runs == []
    assert result.error_code == ErrorCode.INVALID_ARGUMENTS
    assert session.steps[0].skip_reason == "missing"
    assert result.model_text() == (
        f"Not run: write_file needs the required {missing}. "
        "Call it again with every required argument."
    )


@pytest.mark.parametrize("arguments", ["{not json", "[1, 2]", 7])
async def test_arguments_that_are_not_an_object_fail_without_running(
    root: Path, arguments: Any
) -> None:
    runs: list[str] = []
    session = make_session(root, runs=runs)
    result = await session.call("read_file", arguments)
    assert runs == []
    assert result.error_code == ErrorCode.INVALID_ARGUMENTS
    assert (session.steps[0].failed, session.steps[0].skipped) == (True, False)


async def test_unknown_tool_is_a_failed_step(root: Path) -> None:
    session = make_session(root)
    result = await session.call("delete_everything", {"path": "."})
    assert result.model_text() == (
        "Unknown tool 'delete_everything'; the tools are: edit_file, list_files, read_file, "
        "run_command, write_file"
    )
    assert steps_of(session) == [
        step(0, "delete_everything", {"path": "."}, result.model_text(), failed=True)
    ]


async def test_call_takes_a_tool_as_adapters_pass_it(root: Path) -> None:
    session = make_session(root)
    reader = next(t for t in session.tools if t.name == "read_file")
    result = await session.call(reader, {"path": "src/app.py"}, "mcp-1", None)
    assert (result.call_id, result.model_text()) == ("mcp-1", APP_LINES)
    assert steps_of(session) == [step(0, "read_file", READ_APP, APP_LINES)]


def test_session_refuses_ambiguous_construction(tmp_path: Path) -> None:
    workspace = Workspace(tmp_path)
    with pytest.raises(TypeError, match="workspace= applies when tools is a sequence"):
        ToolSession(workspace, workspace=workspace)
    tools = session_tools(workspace)
    with pytest.raises(ValueError, match=r"given more than once: \['read_file'\]"):
        ToolSession([*tools, tools[0]])


def test_record_has_a_json_schema(tmp_path: Path) -> None:
    schema = SessionRecord.model_json_schema()
    assert set(schema["properties"]) == {"steps", "trace"}
    assert set(schema["$defs"]["Step"]["properties"]) == {
        "index",
        "tool",
        "input",
        "result",
        "skipped",
        "skip_reason",
        "denied_by",
        "cached",
        "failed",
        "changed_files",
    }


class PingArgs(BaseModel):
    text: str = "ping"


async def test_read_only_tool_without_a_fingerprint_is_never_cached(tmp_path: Path) -> None:
    calls: list[str] = []

    def execute(args: PingArgs, context: ToolContext) -> str:
        calls.append(args.text)
        return f"{args.text} {len(calls)}"

    ping = tool(name="ping", description="", parameters=PingArgs, execute=execute, read_only=True)
    session = ToolSession([ping])
    first = await session.call("ping", {})
    second = await session.call("ping", {})
    assert (first.model_text(), second.model_text()) == ("ping 1", "ping 2")


async def test_fingerprint_hook_caches_a_custom_read_only_tool(tmp_path: Path) -> None:
    version = {"value": 1}
    calls: list[str] = []

    def execute(args: PingArgs, context: ToolContext) -> str:
        calls.append(args.text)
        return f"{args.text} {version['value']}"

    ping = tool(name="ping", description="", parameters=PingArgs, execute=execute, read_only=True)
    session = ToolSession([ping], fingerprints={"ping": lambda args: version["value"]})
    await session.call("ping", {})
    await session.call("ping", {"text": "ping"})
    version["value"] = 2
    last = await session.call("ping", {})
    assert [s.cached for s in session.steps] == [False, True, False]
    assert last.model_text() == "ping 2"
    assert calls == ["ping", "ping"]


async def test_a_tool_declares_its_cache_key(tmp_path: Path) -> None:
    version = {"value": 1}
    calls: list[str] = []

    def execute(args: PingArgs, context: ToolContext) -> str:
        calls.append(args.text)
        return f"{args.text} {version['value']}"

    ping = tool(
        name="ping",
        description="",
        parameters=PingArgs,
        execute=execute,
        read_only=True,
        cache_key=lambda args: (args.text, version["value"]),
    )
    session = ToolSession([ping])
    await session.call("ping", {})
    await session.call("ping", {"text": "ping"})
    version["value"] = 2
    last = await session.call("ping", {})
    assert [s.cached for s in session.steps] == [False, True, False]
    assert (last.model_text(), calls) == ("ping 2", ["ping", "ping"])


async def test_fingerprints_take_precedence_over_the_tools_key(tmp_path: Path) -> None:
    def execute(args: PingArgs, context: ToolContext) -> str:
        return args.text

    ping = tool(
        name="ping",
        description="",
        parameters=PingArgs,
        execute=execute,
        read_only=True,
        cache_key=lambda args: "always the same",
    )
    session = ToolSession([ping], fingerprints={"ping": lambda args: None})
    await session.call("ping", {})
    await session.call("ping", {})
    assert [s.cached for s in session.steps] == [False, False]


@pytest.mark.parametrize(
    ("read_only", "invalidates_cache", "cached"),
    [
        (False, None, False),  # by default a tool that may change things invalidates
        (False, False, True),  # ... unless it declares it changes nothing others read
        (True, None, True),
        (True, True, False),
    ],
)
async def test_a_tool_declares_whether_it_invalidates_the_cache(
    tmp_path: Path, read_only: bool, invalidates_cache: bool | None, cached: bool
) -> None:
    def ping(args: PingArgs, context: ToolContext) -> str:
        return args.text

    reader = tool(
        name="ping",
        description="",
        parameters=PingArgs,
        execute=ping,
        read_only=True,
        cache_key=lambda args: "unchanged",
    )
    other = tool(
        name="notify",
        description="",
        parameters=PingArgs,
        execute=ping,
        read_only=read_only,
        invalidates_cache=invalidates_cache,
    )
    session = ToolSession([reader, other])
    await session.call("ping", {})
    await session.call("notify", {})
    await session.call("ping", {})
    assert [s.cached for s in session.steps] == [False, False, cached]


async def test_workspace_tools_passed_as_a_list_are_cached(tmp_path: Path) -> None:
    (tmp_path / "a.txt").write_text("a\n", encoding="utf-8")
    session = ToolSession(workspace_tools(tmp_path))
    first = await session.call("read_file", {"path": "a.txt"})
    second = await session.call("read_file", {"path": "a.txt"})
    assert [s.cached for s in session.steps] == [False, True]
    # The cached step gives the text the run gave (its format is read_file's business).
    assert (first.error, second.model_text()) == (None, first.model_text())


async def test_unknown_argument_in_a_session_is_invalid_and_never_runs(root: Path) -> None:
    runs: list[str] = []
    session = make_session(root, runs=runs)
    result = await session.call("read_file", {"path": "src/app.py", "limt": 1})
    message = (
        "Invalid arguments for read_file:\n"
        "- limt: unknown argument (the arguments are: path, offset, limit)"
    )
    assert (result.error_code, result.error, runs) == (ErrorCode.INVALID_ARGUMENTS, message, [])
    assert steps_of(session) == [
        step(0, "read_file", {"path": "src/app.py", "limt": 1}, message, failed=True)
    ]


async def test_a_session_call_validates_and_presents_its_arguments_once(tmp_path: Path) -> None:
    validated: list[str] = []
    presented: list[str] = []

    class Counted(BaseModel):
        text: str

        @model_validator(mode="after")
        def count(self) -> Counted:
            validated.append(self.text)
            return self

    def present(args: Counted) -> ToolPresentation:
        presented.append(args.text)
        return ToolPresentation(label="Echo", icon="repeat", detail=args.text)

    echo = tool(
        name="echo",
        description="",
        parameters=Counted,
        execute=lambda args, context: args.text,
        presentation=present,
    )
    session = ToolSession([echo])
    result = await session.call("echo", {"text": "hi"})
    assert (result.content, validated, presented) == ("hi", ["hi"], ["hi"])
    assert result.presentation == ToolPresentation(label="Echo", icon="repeat", detail="hi")


async def test_concurrent_calls_run_one_after_another(tmp_path: Path) -> None:
    active: list[int] = [0]
    overlap: list[bool] = []

    async def execute(args: PingArgs, context: ToolContext) -> str:
        active[0] += 1
        overlap.append(active[0] > 1)
        for _ in range(5):
            await anyio.sleep(0)
        active[0] -= 1
        return args.text

    ping = tool(name="ping", description="", parameters=PingArgs, execute=execute)
    session = ToolSession([ping])
    async with anyio.create_task_group() as group:
        for i in range(4):
            group.start_soon(session.call, "ping", {"text": str(i)})
    assert overlap == [False] * 4
    assert sorted(s.index for s in session.steps) == [0, 1, 2, 3]


async def test_cancelled_call_is_recorded_as_failed(tmp_path: Path) -> None:
    started = anyio.Event()

    async def execute(args: PingArgs, context: ToolContext) -> str:
        started.set()
        await anyio.sleep_forever()
        return "never"

    hang = tool(name="hang", description="", parameters=PingArgs, execute=execute)
    session = ToolSession([hang])
    async with anyio.create_task_group() as group:
        group.start_soon(session.call, "hang", {})
        with anyio.fail_after(DEADLINE):
            await started.wait()
        group.cancel_scope.cancel()
    assert steps_of(session) == [
        step(
            0,
            "hang",
            {"text": "ping"},
            "The hang call was cancelled while it ran; it may have run in part.",
            failed=True,
        )
    ]
    assert [(e.type, getattr(e, "error_code", None)) for e in session.trace] == [
        ("call", None),
        ("policy", None),
        ("tool", ErrorCode.ABORTED),
    ]


async def test_call_cancelled_while_asking_is_recorded_as_not_run(root: Path) -> None:
    asking = anyio.Event()

    async def confirm(request: ConfirmationRequest) -> bool:
        asking.set()
        await anyio.sleep_forever()
        return True

    runs: list[str] = []
    session = make_session(root, confirm, runs=runs)
    async with anyio.create_task_group() as group:
        group.start_soon(session.call, "write_file", {"path": "n.md", "content": "x"})
        with anyio.fail_after(DEADLINE):
            await asking.wait()
        group.cancel_scope.cancel()
    assert runs == []
    assert steps_of(session) == [
        step(
            0,
            "write_file",
            {"path": "n.md", "content": "x"},
            "The write_file call was cancelled before it ran.",
            failed=True,
        )
    ]


def test_call_sync_runs_the_call(root: Path) -> None:
    session = make_session(root)
    first = session.call_sync("read_file", {"path": "src/app.py"})
    second = session.call_sync("read_file", {"path": "src/app.py"})
    assert first.model_text() == second.model_text() == APP_LINES
    assert [s.cached for s in session.steps] == [False, True]


async def test_max_result_length_applies_to_skipped_calls_too(root: Path) -> None:
    workspace = Workspace(root)
    session = ToolSession(
        session_tools(workspace), workspace=workspace, policy=POLICY, max_result_length=60
    )
    denied = await session.call("run_command", {"command": "rm -rf src"})
    assert denied.model_text() == ("Not run: policy rul\n[truncated: showing 19 of 88 characters]")
    assert session.steps[0].result == denied.model_text()
