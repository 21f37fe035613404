"""Policy rules: first match wins, argument conditions, path globs, command-line flags."""

from __future__ import annotations

import argparse
import os
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from session_tools import session_tools

from workspace_tools import ArgumentCondition, Policy, PolicyRule, Workspace
from workspace_tools.cli._policy import (
    add_policy_arguments,
    parse_policy_flag,
    policy_from_arguments,
    policy_from_flags,
)
from workspace_tools.session._policy import PolicyDecision


@pytest.fixture
def workspace(tmp_path: Path) -> Workspace:
    (tmp_path / "src").mkdir()
    (tmp_path / "etc").mkdir()
    (tmp_path / "src" / "link").symlink_to("../etc")
    (tmp_path / "lib").symlink_to("src")
    return Workspace(tmp_path)


def decide(policy: Policy, workspace: Workspace, name: str, arguments: dict[str, Any]) -> str:
    tools = {t.name: t for t in session_tools(workspace)}
    tool = tools[name]
    return policy.decide(tool, tool.parameters.model_validate(arguments), workspace).rule


FLAGS = [
    ("allow", "read_file"),
    ("deny", r"run_command:command~\brm\b"),
    ("ask", "write_file,edit_file:path!=src/**"),
    ("deny", "*"),
]
ASK = "--ask write_file,edit_file:path!=src/**"


@pytest.mark.parametrize(
    ("name", "arguments", "rule"),
    [
        ("read_file", {"path": "/etc/passwd"}, "--allow read_file"),
        ("run_command", {"command": "rm -rf build"}, r"--deny run_command:command~\brm\b"),
        ("run_command", {"command": "ls; rm x"}, r"--deny run_command:command~\brm\b"),
        ("run_command", {"command": "git rmx"}, "--deny *"),
        ("write_file", {"path": "notes.md", "content": ""}, ASK),
        ("write_file", {"path": "src/a.py", "content": ""}, "--deny *"),
        ("write_file", {"path": "./src/deep/a.py", "content": ""}, "--deny *"),
        ("write_file", {"path": "src/../a.py", "content": ""}, ASK),
        ("write_file", {"path": "src", "content": ""}, ASK),
        ("write_file", {"path": "src/link/x", "content": ""}, ASK),
        ("write_file", {"path": "lib/x.py", "content": ""}, "--deny *"),
        ("write_file", {"path": "../outside.py", "content": ""}, ASK),
        ("list_files", {}, "--deny *"),
    ],
)  # fmt: skip
def test_first_matching_flag_decides(
    workspace: Workspace, name: str, arguments: dict[str, Any], rule: str
) -> None:
    assert decide(policy_from_flags(FLAGS), workspace, name, arguments) == rule


def test_absolute_path_inside_the_root_is_tested_relative(workspace: Workspace) -> None:
    policy = policy_from_flags([("ask", "write_file:path!=src/**")])
    inside = str(workspace.root / "src" / "a.py")
    assert decide(policy, workspace, "write_file", {"path": inside, "content": ""}) == "default"


def test_condition_on_an_argument_the_tool_lacks_never_holds(workspace: Workspace) -> None:
    policy = policy_from_flags([("deny", "*:path!=src/**")])
    assert decide(policy, workspace, "run_command", {"command": "ls"}) == "default"
    assert decide(policy, workspace, "read_file", {"path": "etc/x"}) == "--deny *:path!=src/**"


def test_read_only_rule_covers_every_tool_that_may_change_something(
    workspace: Workspace,
) -> None:
    policy = Policy(rules=(PolicyRule(name="writes", decision="ask", read_only=False),))
    decided = {
        name: decide(policy, workspace, name, args)
        for name, args in [
            ("read_file", {"path": "a"}),
            ("list_files", {}),
            ("write_file", {"path": "a", "content": ""}),
            ("run_command", {"command": "ls"}),
        ]
    }
    assert decided == {
        "read_file": "default",
        "list_files": "default",
        "write_file": "writes",
        "run_command": "writes",
    }


def test_pattern_tests_non_string_arguments_as_json(workspace: Workspace) -> None:
    rule = ArgumentCondition(argument="recursive", pattern="^true$")
    policy = Policy(rules=(PolicyRule(name="deep", decision="deny", when=(rule,)),))
    assert decide(policy, workspace, "list_files", {"recursive": True}) == "deep"
    assert decide(policy, workspace, "list_files", {}) == "default"


def test_default_decision_carries_the_default_rule_name(workspace: Workspace) -> None:
    tools = {t.name: t for t in session_tools(workspace)}
    args = tools["read_file"].parameters.model_validate({"path": "a"})
    assert Policy(default="deny").decide(tools["read_file"], args) == PolicyDecision(
        decision="deny", rule="default"
    )


def test_policy_round_trips_through_json() -> None:
    policy = Policy(
        rules=(
            parse_policy_flag("deny", r"run_command:command~sudo\s"),
            PolicyRule(name="r", decision="ask", tools=("edit_file",), reason="check edits"),
        ),
        default="ask",
    )
    assert Policy.model_validate_json(policy.model_dump_json()) == policy


@pytest.mark.parametrize(
    ("spec", "expected"),
    [
        ("ls", PolicyRule(name="--deny ls", decision="deny", tools=("ls",))),
        ("*", PolicyRule(name="--deny *", decision="deny")),
        (
            "a, b:path=src/**",
            PolicyRule(
                name="--deny a, b:path=src/**",
                decision="deny",
                tools=("a", "b"),
                when=(ArgumentCondition(argument="path", glob="src/**"),),
            ),
        ),
        (
            "run_command:command!~^(ls|cat) ",
            PolicyRule(
                name="--deny run_command:command!~^(ls|cat) ",
                decision="deny",
                tools=("run_command",),
                when=(ArgumentCondition(argument="command", pattern="^(ls|cat) ", negate=True),),
            ),
        ),
        (
            "run_command:command~a=b:c",
            PolicyRule(
                name="--deny run_command:command~a=b:c",
                decision="deny",
                tools=("run_command",),
                when=(ArgumentCondition(argument="command", pattern="a=b:c"),),
            ),
        ),
    ],
)  # fmt: skip
def test_parse_policy_flag(spec: str, expected: PolicyRule) -> None:
    assert parse_policy_flag("deny", spec) == expected


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ("", "names no tool"),
        (" , ", "names no tool"),
        ("run_command:command", "is not ARG~REGEX"),
        ("run_command:command~(", "invalid regular expression"),
    ],
)
def test_bad_policy_flags_are_refused(spec: str, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        parse_policy_flag("deny", spec)


def test_condition_needs_exactly_one_test() -> None:
    with pytest.raises(ValueError, match="exactly one of pattern and glob"):
        ArgumentCondition(argument="path", pattern="a", glob="b")


def test_argparse_flags_keep_their_order() -> None:
    parser = argparse.ArgumentParser()
    add_policy_arguments(parser)
    namespace = parser.parse_args(
        ["--allow", "read_file", "--ask", "run_command", "--deny", "*", "--allow", "glob"]
    )
    policy = policy_from_arguments(namespace)
    assert [(rule.decision, rule.name) for rule in policy.rules] == [
        ("allow", "--allow read_file"),
        ("ask", "--ask run_command"),
        ("deny", "--deny *"),
        ("allow", "--allow glob"),
    ]


def test_argparse_without_flags_allows_everything() -> None:
    parser = argparse.ArgumentParser()
    add_policy_arguments(parser)
    assert policy_from_arguments(parser.parse_args([])) == Policy()


def test_argparse_reports_a_bad_flag(capsys: pytest.CaptureFixture[str]) -> None:
    parser = argparse.ArgumentParser(prog="workspace-tools mcp")
    add_policy_arguments(parser)
    with pytest.raises(SystemExit):
        parser.parse_args(["--deny", "run_command:command~("])
    assert "invalid regular expression" in capsys.readouterr().err


SEGMENTS = ["src", "lib", "etc", "a.py", "..", ".", "link", ""]


@settings(max_examples=200, deadline=None)
@given(parts=st.lists(st.sampled_from(SEGMENTS), min_size=1, max_size=6))
def test_path_glob_follows_the_real_location(tmp_path_factory, parts: list[str]) -> None:
    root = tmp_path_factory.getbasetemp() / "policy-paths"
    if not root.exists():
        (root / "src").mkdir(parents=True)
        (root / "etc").mkdir()
        (root / "src" / "link").symlink_to("../etc")
        (root / "lib").symlink_to("src")
    workspace = Workspace(root)
    path = "/".join(parts) or "."
    real = os.path.realpath(os.path.join(workspace.root, path))
    src = os.path.join(str(workspace.root), "src")
    inside_src = real.startswith(src + os.sep)
    inside_root = real == str(workspace.root) or real.startswith(str(workspace.root) + os.sep)
    condition = ArgumentCondition(argument="path", glob="src/**")
    held = condition.holds({"path": path}, workspace)
    if inside_root:
        assert held is inside_src
    else:
        assert held is False
