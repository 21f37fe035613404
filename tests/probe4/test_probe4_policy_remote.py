"""Policy path globs on tools with no local workspace (a RemoteWorkspace's): every spelling
of a denied path is denied (relative, ``./``, ``src/../src/x``, absolute, above the root),
and a path the policy cannot place in the workspace is never let through a restricting
rule. No server is needed: a denied call never reaches one."""

from __future__ import annotations

import anyio
import pytest

pytest.importorskip("mcp")

from workspace_tools import ArgumentCondition, ErrorCode, Policy, PolicyRule, ToolSession
from workspace_tools.adapters.remote import RemoteWorkspace

pytestmark = pytest.mark.anyio

# Nothing listens on port 9 (discard): a call that got through would be unavailable.
URL = "http://127.0.0.1:9/mcp"
SRC = (ArgumentCondition(argument="path", glob="src/**"),)
UNPLACED = (
    "the policy cannot tell where {path} lies in the workspace (no local workspace "
    "resolves it); name the path relative to the workspace root"
)


@pytest.fixture
def remote() -> RemoteWorkspace:
    with RemoteWorkspace(URL, "token", retries=0, connect_timeout=2) as workspace:
        yield workspace


def test_remote_tools_carry_no_local_workspace(remote: RemoteWorkspace) -> None:
    # The local definitions are built on a temporary directory that is gone: a session
    # must not take it for the remote workspace (its policy, its checkpoints).
    assert [t.workspace for t in remote.tools] == [None] * len(remote.tools)
    assert ToolSession(remote.tools).workspace is None


@pytest.mark.parametrize(
    ("path", "denied_as"),
    [
        ("src/x", None),
        ("./src/x", None),
        ("src/../src/x", None),
        ("src//x", None),
        ("docs/../src/x", None),
        ("/srv/project/src/x", "'/srv/project/src/x'"),
        ("../project/src/x", "'../project/src/x'"),
        ("/srv/project/docs/x", "'/srv/project/docs/x'"),
    ],
)
async def test_every_spelling_of_a_denied_path_is_denied(
    remote: RemoteWorkspace, path: str, denied_as: str | None
) -> None:
    rule = PolicyRule(name="no-src", decision="deny", tools=("write_file",), when=SRC)
    session = ToolSession(remote.tools, policy=Policy(rules=(rule,)))
    with anyio.fail_after(30):
        result = await session.call("write_file", {"path": path, "content": "x"})
    because = "." if denied_as is None else ": " + UNPLACED.format(path=denied_as)
    assert (result.error_code, result.error) == (
        ErrorCode.PERMISSION_DENIED,
        f"Not run: policy rule 'no-src' denies this write_file call{because}",
    )
    assert session.steps[-1].denied_by == "no-src"


async def test_an_allowing_rule_does_not_let_an_unplaced_path_through(
    remote: RemoteWorkspace,
) -> None:
    rules = (
        PolicyRule(name="src-ok", decision="allow", tools=("write_file",), when=SRC),
        PolicyRule(name="rest", decision="deny"),
    )
    session = ToolSession(remote.tools, policy=Policy(rules=rules))
    with anyio.fail_after(30):
        result = await session.call("write_file", {"path": "/srv/project/src/x", "content": "x"})
    assert (result.error_code, session.steps[-1].denied_by) == (
        ErrorCode.PERMISSION_DENIED,
        "rest",
    ), result.error


async def test_a_patch_naming_an_absolute_path_is_denied(remote: RemoteWorkspace) -> None:
    rule = PolicyRule(name="no-src", decision="deny", tools=("apply_patch",), when=SRC)
    session = ToolSession(remote.tools, policy=Policy(rules=(rule,)))
    patch = "*** Begin Patch\n*** Add File: docs/ok\n+x\n*** Add File: /p/src/y\n+x\n*** End Patch"
    with anyio.fail_after(30):
        result = await session.call("apply_patch", {"patch": patch})
    assert (result.error_code, session.steps[-1].denied_by) == (
        ErrorCode.PERMISSION_DENIED,
        "no-src",
    ), result.error


async def test_a_relative_path_outside_the_rule_still_runs(remote: RemoteWorkspace) -> None:
    rule = PolicyRule(name="no-src", decision="deny", tools=("write_file",), when=SRC)
    session = ToolSession(remote.tools, policy=Policy(rules=(rule,)))
    with anyio.fail_after(30):
        result = await session.call("write_file", {"path": "docs/x", "content": "x"})
    # It got past the policy to the (absent) server.
    assert result.error_code is ErrorCode.WORKSPACE_UNAVAILABLE, result.error
