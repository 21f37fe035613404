"""A path rule of a policy holds for every file a call names, wherever the tool takes it
from: ``apply_patch`` names its files in the patch text, not in a ``path`` argument."""

from __future__ import annotations

from pathlib import Path

import pytest

from workspace_tools import (
    ArgumentCondition,
    ErrorCode,
    Policy,
    PolicyRule,
    ToolSession,
    Workspace,
)
from workspace_tools.cli._policy import policy_from_flags
from workspace_tools.tools import workspace_tools

DENY_SECRETS = PolicyRule(
    name="no secrets",
    decision="deny",
    read_only=False,
    when=(ArgumentCondition(argument="path", glob="secrets/**"),),
)


@pytest.fixture
def root(tmp_path: Path) -> Path:
    (tmp_path / "secrets").mkdir()
    (tmp_path / "secrets" / "key").write_bytes(b"old\n")
    (tmp_path / "src").mkdir()
    (tmp_path / "src" / "a.py").write_bytes(b"a = 1\n")
    (tmp_path / "s").symlink_to("secrets")
    return tmp_path


def session(root: Path, policy: Policy) -> ToolSession:
    workspace = Workspace(root)
    return ToolSession(workspace_tools(workspace), workspace=workspace, policy=policy)


def patch(*body: str) -> dict[str, str]:
    return {"patch": "\n".join(("*** Begin Patch", *body, "*** End Patch"))}


@pytest.mark.parametrize(
    "body",
    [
        ("*** Add File: secrets/new", "+x"),
        ("*** Add File: ./secrets/new", "+x"),
        ("*** Add File: src/../secrets/new", "+x"),
        ("*** Add File: s/new", "+x"),
        ("*** Update File: s/key", "@@", "-old", "+new"),
        ("*** Delete File: secrets/key",),
        ("*** Update File: src/a.py", "*** Move to: secrets/a.py", "@@", "-a = 1", "+a = 2"),
        ("*** Add File: src/ok.py", "+x", "*** Add File: secrets/new", "+x"),
    ],
)
def test_apply_patch_cannot_write_past_a_path_rule(root: Path, body: tuple[str, ...]) -> None:
    before = sorted((p.relative_to(root).as_posix(), p.read_bytes()) for p in _files(root))
    result = session(root, Policy(rules=(DENY_SECRETS,))).call_sync("apply_patch", patch(*body))
    assert result.error_code == ErrorCode.PERMISSION_DENIED, result.error
    assert result.error == "Not run: policy rule 'no secrets' denies this apply_patch call."
    after = sorted((p.relative_to(root).as_posix(), p.read_bytes()) for p in _files(root))
    assert after == before


def test_apply_patch_outside_the_rule_runs(root: Path) -> None:
    result = session(root, Policy(rules=(DENY_SECRETS,))).call_sync(
        "apply_patch", patch("*** Add File: src/b.py", "+b = 2")
    )
    assert result.error_code is None, result.error
    assert (root / "src" / "b.py").read_bytes() == b"b = 2\n"


def test_the_strictest_decision_over_the_named_files_wins(root: Path) -> None:
    # An allow rule for src/** must not let a patch that also writes outside src through.
    policy = policy_from_flags([("allow", "apply_patch:path=src/**"), ("deny", "*")])
    s = session(root, policy)
    mixed = s.call_sync(
        "apply_patch", patch("*** Add File: src/b.py", "+b", "*** Add File: top.py", "+t")
    )
    assert mixed.error_code == ErrorCode.PERMISSION_DENIED, mixed.error
    assert mixed.error == "Not run: policy rule '--deny *' denies this apply_patch call."
    assert not (root / "src" / "b.py").exists() and not (root / "top.py").exists()
    inside = s.call_sync("apply_patch", patch("*** Add File: src/b.py", "+b"))
    assert inside.error_code is None, inside.error


def test_a_path_rule_on_apply_patch_alone_is_accepted(root: Path) -> None:
    # Before, check_policy refused it: apply_patch takes no argument called path.
    policy = policy_from_flags([("ask", "apply_patch:path!=src/**")])
    result = session(root, policy).call_sync("apply_patch", patch("*** Add File: x", "+x"))
    assert result.error_code == ErrorCode.PERMISSION_DENIED, result.error
    assert not (root / "x").exists()


def _files(root: Path) -> list[Path]:
    return [p for p in root.rglob("*") if p.is_file() and not p.is_symlink()]


def test_the_undo_tool_cannot_put_back_files_past_a_path_rule(root: Path) -> None:
    # A command (no path argument) changed a denied file; undoing it writes there too.
    workspace = Workspace(root)
    s = ToolSession(
        workspace_tools(workspace),
        workspace=workspace,
        policy=Policy(rules=(DENY_SECRETS,)),
        checkpoints=True,
    )
    with s:
        ran = s.call_sync("run_command", {"command": "printf new > secrets/key"})
        assert ran.error is None, ran.error
        undo = s.undo_tool()
        for arguments in ({}, {"paths": ["."]}, {"paths": ["secrets"]}):
            refused = s.call_sync(undo, arguments)
            assert (refused.error_code, refused.error) == (
                ErrorCode.PERMISSION_DENIED,
                "Not run: policy rule 'no secrets' denies this undo call.",
            ), arguments
        assert (root / "secrets" / "key").read_bytes() == b"new"
        s.call_sync("run_command", {"command": "printf b > src/a.py"})
        allowed = s.call_sync(undo, {"paths": ["src"]})
        assert allowed.error is None, allowed.error
        assert (root / "src" / "a.py").read_bytes() == b"a = 1\n"
