"""Checkpoints in the MCP server the command line starts: on by default, the files a call
changed in its details, and the ``undo`` tool behind a flag (through the policy too)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.adapters.test_mcp import NS, REPO, connect, workspace_server
from tests.test_checkpoints import tree

# What a model reads when no change is left to undo: never that nothing changed, since
# every change may have been undone already.
UNDONE_ALL = (
    "Nothing to undo: no change of this session is left to undo (no step changed a file, or "
    "each change was undone already)."
)

pytestmark = pytest.mark.anyio


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"  # the server is a subprocess; the client's backend is not under test


COMMAND = "printf 'x\\n' > made.txt && rm gone.txt && chmod 700 kept.txt"
CHANGED = [
    {"path": "gone.txt", "change": "deleted", "type": "file", "restorable": True},
    {"path": "kept.txt", "change": "changed", "type": "file", "restorable": True},
    {"path": "made.txt", "change": "created", "type": "file", "restorable": True},
]


@pytest.fixture
def root(tmp_path: Path) -> Path:
    work = tmp_path / "work"
    work.mkdir()
    (work / "gone.txt").write_bytes(b"gone\n")
    (work / "kept.txt").write_bytes(b"kept\n")
    (work / "kept.txt").chmod(0o644)
    return work


def details(result: Any) -> Any:
    return (result.meta or {}).get(NS + "details")


@pytest.mark.parametrize("policy", [[], ["--deny", "grep"]])
async def test_undo_tool_undoes_a_command_in_the_served_workspace(
    root: Path, policy: list[str]
) -> None:
    before = tree(root)
    async with connect(*workspace_server(root, "--undo-tool", *policy)) as session:
        names = [t.name for t in (await session.list_tools()).tools]
        ran = await session.call_tool("run_command", {"command": COMMAND})
        preview = await session.call_tool("undo", {"dry_run": True})
        undone = await session.call_tool("undo", {})
        again = await session.call_tool("undo", {})
    assert names[-1] == "undo"
    assert details(ran)["changed_files"] == CHANGED
    assert preview.isError is False
    assert "diff --git a/made.txt b/made.txt\ndeleted file mode 100644" in preview.content[0].text  # type: ignore[union-attr]
    assert undone.content[0].text == (  # type: ignore[union-attr]
        "Restored 3 paths as before step 0:\n"
        "  created gone.txt\n  changed kept.txt\n  deleted made.txt"
    )
    assert [r["path"] for r in details(undone)["changed_files"]] == [
        "gone.txt",
        "kept.txt",
        "made.txt",
    ]
    assert again.content[0].text == UNDONE_ALL  # type: ignore[union-attr]
    assert tree(root) == before


async def test_checkpoints_are_on_by_default_without_an_undo_tool(root: Path) -> None:
    async with connect(*workspace_server(root)) as session:
        names = [t.name for t in (await session.list_tools()).tools]
        ran = await session.call_tool("run_command", {"command": COMMAND})
    assert "undo" not in names
    assert details(ran)["changed_files"] == CHANGED


async def test_no_checkpoints_leaves_details_as_the_tool_gives_them(root: Path) -> None:
    async with connect(*workspace_server(root, "--no-checkpoints")) as session:
        ran = await session.call_tool("run_command", {"command": COMMAND})
    assert "changed_files" not in details(ran)


def test_undo_tool_needs_checkpoints(root: Path) -> None:
    for flags in (["--no-checkpoints"], ["--read-only"]):
        done = subprocess.run(
            [
                sys.executable,
                "-m",
                "workspace_tools",
                "mcp",
                "--root",
                str(root),
                "--undo-tool",
                *flags,
            ],
            cwd=REPO,
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert (done.returncode, done.stderr) == (
            2,
            "workspace-tools: error: --undo-tool needs checkpoints "
            "(no --no-checkpoints, no --read-only)\n",
        )


def cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "workspace_tools", *args],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=60,
    )


async def test_kept_checkpoints_are_listed_and_restored_after_the_server_exits(
    root: Path, tmp_path: Path
) -> None:
    kept = tmp_path / "kept"
    before = tree(root)
    async with connect(*workspace_server(root, "--checkpoint-dir", str(kept))) as session:
        await session.call_tool("run_command", {"command": COMMAND})
        await session.call_tool("write_file", {"path": "made.txt", "content": "y\n"})
    listed = cli("checkpoints", str(kept))
    assert (listed.returncode, listed.stderr) == (0, "")
    assert listed.stdout == (
        f"workspace {root}\n"
        "step 0\n  deleted gone.txt\n  changed kept.txt\n  created made.txt\n"
        "step 1\n  changed made.txt\n"
    )
    (root / "kept.txt").write_bytes(b"someone else\n")
    refused = cli("restore", str(kept), "0")
    assert (refused.returncode, refused.stdout) == (
        1,
        "Not restored: 1 file changed since the session's steps left them (by someone "
        "else); nothing was changed. Restore them anyway with --overwrite, or name the "
        "others:\n  kept.txt\n",
    )
    typo = cli("restore", str(kept), "9")
    assert (typo.returncode, typo.stdout) == (2, "")
    assert typo.stderr.endswith("error: no step 9 or later was kept (kept steps: 0, 1)\n")
    preview = cli("restore", str(kept), "0", "made.txt", "--dry-run")
    assert preview.returncode == 0
    assert preview.stdout.startswith("Would restore 1 path as before step 0:\n  deleted made.txt\n")
    done = cli("restore", str(kept), "0", "--overwrite")
    assert (done.returncode, done.stderr) == (0, "")
    assert tree(root) == before
    assert "(undone)" in cli("checkpoints", str(kept)).stdout


def test_restore_of_a_directory_without_a_record_is_a_usage_error(tmp_path: Path) -> None:
    done = cli("restore", str(tmp_path), "0")
    assert (done.returncode, done.stderr) == (
        2,
        f"workspace-tools: error: no checkpoints recorded in {tmp_path}\n",
    )


def test_checkpoint_dir_inside_the_root_is_a_usage_error(root: Path) -> None:
    done = cli("mcp", "--root", str(root), "--checkpoint-dir", str(root / "kept"))
    assert (done.returncode, done.stderr) == (
        2,
        f"workspace-tools: error: the checkpoint store {root / 'kept'} must be outside the "
        f"workspace {root} (--checkpoint-dir DIR puts it elsewhere, --no-checkpoints turns "
        "them off)\n",
    )
    assert not (root / "kept").exists()


@pytest.mark.parametrize("policy", [[], ["--deny", "grep"]])
async def test_undo_leaves_what_the_sandbox_set_aside(tmp_path: Path, policy: list[str]) -> None:
    # The persistent shell holds a `.envrc` it wrote under its own name until it ends, so
    # the checkpoint after that step holds it; the shell's end sets it aside. An undo runs
    # outside the sandbox: putting `.envrc` back would hand direnv what the command wrote.
    from sandbox import Sandbox
    from sandbox.layers import HOST_EXEC_PROTECTION

    if HOST_EXEC_PROTECTION not in Sandbox().confined_to(str(tmp_path)).capabilities:
        pytest.skip("no layer here keeps host exec paths read-only")
    root = tmp_path / "work"
    root.mkdir()
    (root / "a.txt").write_bytes(b"a\n")
    marker = tmp_path / "envrc-ran"
    args = ("--sandbox", "--shell", "--undo-tool", *policy)
    async with connect(*workspace_server(root, *args)) as session:
        wrote = await session.call_tool("shell", {"command": f"echo 'touch {marker}' > .envrc"})
        held = sorted(p.name for p in root.iterdir() if not p.name.startswith(".shell-output"))
        await session.call_tool("shell", {"command": "exit"})
        undone = await session.call_tool("undo", {})
        after = sorted(p.name for p in root.iterdir() if not p.name.startswith(".shell-output"))

    assert wrote.isError is False, wrote.content
    assert held == [".envrc", "a.txt"]
    assert after == [".envrc.sandbox-blocked", "a.txt"]
    assert (root / ".envrc.sandbox-blocked").read_text() == f"touch {marker}\n"
    assert undone.content[0].text == (  # type: ignore[union-attr]
        "Nothing to restore: no file changed from step 1 on.\n"
        "Left as they are (the sandbox keeps these from commands: tools on the host run "
        "what they hold):\n  .envrc\n  .envrc.sandbox-blocked"
    )
