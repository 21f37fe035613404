"""Paths that tools on the host execute stay read-only inside writable directories.

A sandboxed command that could write `.git/hooks/pre-commit` or set `core.fsmonitor` gets
code run on the host by the next `git status` or `git commit`. Each case runs the attack in
the sandbox, then real git on the host, and looks for the marker files the planted commands
would create. Control runs (no layers, or the protection turned off) prove the attack works.
"""

from __future__ import annotations

import ctypes
import errno
import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from sandbox import HOST_EXEC_PATHS, Sandbox
from sandbox._defaults import git_exec_paths
from sandbox.layers import (
    HOST_EXEC_PROTECTION,
    MOUNT_NAMESPACE,
    missing,
)
from tests._waiting import poll
from tests.sandbox._boxes import force_landlock
from workspace_tools import ErrorCode, invoke_tool
from workspace_tools.tools import workspace_tools

pytestmark = pytest.mark.anyio

CLONE_NEWNS = 0x00020000

GIT_ENV = {
    "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
    "HOME": "/nonexistent",
    "GIT_CONFIG_NOSYSTEM": "1",
    "GIT_AUTHOR_NAME": "t",
    "GIT_AUTHOR_EMAIL": "t@example.com",
    "GIT_COMMITTER_NAME": "t",
    "GIT_COMMITTER_EMAIL": "t@example.com",
}


def git(repo: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """git on the host, as the user would run it after the agent's session."""
    return subprocess.run(
        ["git", *args], cwd=repo, env=GIT_ENV, capture_output=True, text=True, check=False
    )


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    path = tmp_path / "ws"
    path.mkdir()
    assert git(path, "init", "-q").returncode == 0
    (path / "README").write_text("hello\n")
    (path / ".envrc").write_text("export A=1\n")
    assert git(path, "add", "README").returncode == 0
    assert git(path, "commit", "-q", "-m", "first").returncode == 0
    return path


MODES = ["plain", "protection-off", "bubblewrap", "landlock"]


def make_box(mode: str, workspace: Path, monkeypatch: pytest.MonkeyPatch) -> Sandbox:
    """The sandbox of one mode; "plain" and "protection-off" are the control runs."""
    if mode == "plain":
        return Sandbox(layers=False, network=True)
    if mode == "landlock":
        force_landlock(monkeypatch)
    kwargs: dict[str, Any] = {"host_exec_paths": ()} if mode == "protection-off" else {}
    try:
        box = Sandbox(writable=[str(workspace)], **kwargs)
    except Exception as exc:  # SandboxUnavailable: the layer is missing here
        pytest.skip(str(exc))
    expected = {"bubblewrap": "bubblewrap", "landlock": MOUNT_NAMESPACE}.get(mode)
    if box.capabilities.get(HOST_EXEC_PROTECTION) != expected:
        pytest.skip(f"{mode} does not protect paths here: {missing(HOST_EXEC_PROTECTION)}")
    return box


def attack(marker_dir: Path) -> str:
    """A script planting two ways into the host's next git command, then writing what an
    agent legitimately writes; each step prints its exit status."""
    return f"""
echo ran
printf '#!/bin/sh\\ntouch {marker_dir}/hook-ran\\n' > .git/hooks/pre-commit; echo "hook $?"
chmod +x .git/hooks/pre-commit 2>/dev/null
git config core.fsmonitor 'touch {marker_dir}/fsmonitor-ran; false' 2>/dev/null
echo "config $?"
echo 'touch {marker_dir}/envrc-ran' >> .envrc; echo "envrc $?"
echo work > notes.txt; echo "root file $?"
mkdir -p src && echo work > src/a.txt; echo "subdir file $?"
git rev-parse --verify -q HEAD >/dev/null; echo "git reads $?"
"""


@pytest.mark.parametrize("mode", MODES)
async def test_command_cannot_plant_code_the_hosts_git_runs(
    repo: Path, tmp_path: Path, mode: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    box = make_box(mode, repo, monkeypatch)
    config_before = (repo / ".git" / "config").read_bytes()
    result = await box.run(["bash", "-c", attack(tmp_path)], cwd=str(repo), env=GIT_ENV)

    protected = mode in ("bubblewrap", "landlock")
    failed = "1" if protected else "0"
    assert result.stdout.complete.decode().split("\n") == [
        "ran",
        f"hook {failed}",
        f"config {'255' if protected else '0'}",
        f"envrc {failed}",
        "root file 0",
        "subdir file 0",
        "git reads 0",
        "",
    ], result.stderr.complete
    assert ((repo / ".git" / "config").read_bytes() == config_before) is protected
    assert (repo / ".envrc").read_text() == (
        "export A=1\n" if protected else f"export A=1\ntouch {tmp_path}/envrc-ran\n"
    )
    assert (repo / "notes.txt").read_text() == (repo / "src" / "a.txt").read_text() == "work\n"

    # The user's next git commands on the host.
    git(repo, "status")
    git(repo, "add", "notes.txt")
    commit = git(repo, "commit", "-q", "-m", "agent work")

    assert (tmp_path / "fsmonitor-ran").exists() is not protected
    assert (tmp_path / "hook-ran").exists() is not protected
    assert commit.returncode == 0, commit.stderr


@pytest.mark.parametrize("mode", MODES)
async def test_call_cannot_plant_a_git_hook(
    repo: Path, tmp_path: Path, mode: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    box = make_box(mode, repo, monkeypatch)
    protected = mode in ("bubblewrap", "landlock")
    if protected and HOST_EXEC_PROTECTION not in box.call_capabilities:
        pytest.skip(f"calls get no host exec protection here: {box.call_capabilities}")
    hook = repo / ".git" / "hooks" / "pre-commit"
    marker = tmp_path / "hook-ran"

    def plant() -> str:
        try:
            hook.write_text(f"#!/bin/sh\ntouch {marker}\n")
        except OSError as exc:
            return errno.errorcode[exc.errno or 0]
        hook.chmod(0o755)
        (repo / "notes.txt").write_text("work\n")
        return "planted"

    assert await box.call(plant) == ("EROFS" if protected else "planted")
    box.close()  # waits for a worker being forked: it would hold git's pipes meanwhile
    (repo / "notes.txt").write_text("work\n")
    git(repo, "add", "notes.txt")
    commit = git(repo, "commit", "-q", "-m", "agent work")

    assert commit.returncode == 0, commit.stderr
    assert marker.exists() is not protected


@pytest.mark.parametrize("mode", MODES)
async def test_protected_path_created_by_a_command_is_set_aside(
    tmp_path: Path, mode: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A workspace that is not a repository yet: bind mounts cannot keep an absent path
    # read-only, so what the command created under a protected name is renamed after it.
    workspace = tmp_path / "ws"
    workspace.mkdir()
    box = make_box(mode, workspace, monkeypatch)
    script = (
        "git init -q && git config core.fsmonitor 'touch marker' && echo init-ok; "
        "mkdir .vscode && echo '{}' > .vscode/tasks.json && echo tasks-ok"
    )
    result = await box.run(["bash", "-c", script], cwd=str(workspace), env=GIT_ENV)

    assert result.stdout.complete == b"init-ok\ntasks-ok\n", result.stderr.complete
    protected = mode in ("bubblewrap", "landlock")
    assert sorted(p.name for p in workspace.iterdir()) == (
        [".git.sandbox-blocked", ".vscode.sandbox-blocked"] if protected else [".git", ".vscode"]
    )
    assert (workspace / ".vscode.sandbox-blocked" / "tasks.json").exists() is protected
    status = git(workspace, "status")
    assert (status.returncode != 0) is protected  # no repository left at the root


async def test_git_pointer_file_stays_read_only(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A worktree's `.git` is a file naming the git directory: rewriting it would point
    # the host's git at a directory of the agent's making.
    workspace = tmp_path / "ws"
    workspace.mkdir()
    (workspace / ".git").write_text("gitdir: /nonexistent/main/.git/worktrees/ws\n")
    box = make_box("bubblewrap", workspace, monkeypatch)
    result = await box.run(
        ["bash", "-c", "echo 'gitdir: evil' > .git; echo $?"], cwd=str(workspace)
    )
    assert result.stdout.complete == b"1\n"
    assert (workspace / ".git").read_text() == "gitdir: /nonexistent/main/.git/worktrees/ws\n"


def test_host_exec_paths_are_reported_and_can_be_chosen(tmp_path: Path) -> None:
    box = Sandbox(writable=[str(tmp_path)], host_exec_paths=(".git", "Makefile"), best_effort=True)
    assert box.confinement.read_only == (f"{tmp_path}/.git", f"{tmp_path}/Makefile")
    assert Sandbox(writable=[str(tmp_path)], best_effort=True).confinement.read_only == tuple(
        f"{tmp_path}/{name}" for name in HOST_EXEC_PATHS
    )
    assert Sandbox(best_effort=True).confinement.read_only == ()
    confined = Sandbox(best_effort=True).confined_to(str(tmp_path))
    assert confined.confinement.read_only[0] == f"{tmp_path}/.git"


async def test_call_cannot_rejoin_the_hosts_mount_namespace(
    repo: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # In the host's mount namespace `.git` is writable again: a child (root here) that
    # could setns(2) there, by a namespace file or a pidfd of init, would undo the binds.
    # Landlock refuses both: nsfs files get no rule, and ptrace access (which setns by
    # pidfd checks) to a process outside the child's domain is denied.
    box = make_box("landlock", repo, monkeypatch)
    hook = repo / ".git" / "hooks" / "pre-commit"

    def rejoin_and_plant() -> list[str]:
        libc = ctypes.CDLL(None, use_errno=True)
        seen = []
        try:
            os.open("/proc/1/ns/mnt", os.O_RDONLY)
            seen.append("opened")
        except OSError as exc:
            seen.append(errno.errorcode[exc.errno or 0])
        pidfd = os.pidfd_open(1)
        if libc.setns(pidfd, CLONE_NEWNS) != 0:
            seen.append(errno.errorcode[ctypes.get_errno()])
        try:
            hook.write_text("#!/bin/sh\n")
            seen.append("planted")
        except OSError as exc:
            seen.append(errno.errorcode[exc.errno or 0])
        return seen

    try:
        # Root's call sees a procfs of its own, without the host's processes (ENOENT).
        hidden = "ENOENT" if os.geteuid() == 0 else "EACCES"
        assert await box.call(rejoin_and_plant) == [hidden, "EPERM", "EROFS"]
    finally:
        box.close()
    assert not hook.exists()


@pytest.mark.parametrize("mode", MODES)
async def test_command_cannot_rewrite_hooks_a_hooks_path_in_the_work_tree_names(
    repo: Path, tmp_path: Path, mode: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # core.hooksPath = .githooks (a project's shared hooks, husky's .husky/_): git runs
    # the hooks from the work tree, where the agent may write.
    assert git(repo, "config", "core.hooksPath", ".githooks").returncode == 0
    (repo / ".githooks").mkdir()
    (repo / ".githooks" / "pre-commit").write_text("#!/bin/sh\nexit 0\n")
    (repo / ".githooks" / "pre-commit").chmod(0o755)
    box = make_box(mode, repo, monkeypatch)
    plant = f"printf '#!/bin/sh\\ntouch {tmp_path}/hook-ran\\n' > .githooks/pre-commit; echo $?"
    result = await box.run(["bash", "-c", plant], cwd=str(repo), env=GIT_ENV)

    protected = mode in ("bubblewrap", "landlock")
    assert result.stdout.complete == (b"1\n" if protected else b"0\n"), result.stderr.complete
    (repo / "notes.txt").write_text("work\n")
    git(repo, "add", "notes.txt")
    commit = git(repo, "commit", "-q", "-m", "agent work")
    assert commit.returncode == 0, commit.stderr
    assert (tmp_path / "hook-ran").exists() is not protected


def test_git_exec_paths_are_what_the_repositorys_git_runs_in_the_work_tree(
    repo: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("HOME", "/nonexistent")
    monkeypatch.setenv("GIT_CONFIG_NOSYSTEM", "1")
    assert git_exec_paths([str(repo)]) == ()  # hooks in .git, no fsmonitor program
    git(repo, "config", "core.hooksPath", ".githooks")
    git(repo, "config", "core.fsmonitor", "tools/monitor.sh")
    (repo / "sub").mkdir()
    assert git_exec_paths([str(repo), str(repo / "sub")]) == (
        f"{repo}/.githooks",
        f"{repo}/tools/monitor.sh",
    )
    git(repo, "config", "core.hooksPath", "/usr/share/hooks")  # outside: nothing to keep
    git(repo, "config", "core.fsmonitor", "true")  # git's own daemon
    assert git_exec_paths([str(repo)]) == ()
    assert git_exec_paths(["/nonexistent/dir"]) == ()
    box = Sandbox(writable=[str(repo)], best_effort=True)
    assert box.confinement.read_only == tuple(f"{repo}/{name}" for name in HOST_EXEC_PATHS)
    git(repo, "config", "core.hooksPath", "ci/hooks")
    box = Sandbox(writable=[str(repo)], best_effort=True)
    assert box.confinement.read_only[-1] == f"{repo}/ci/hooks"
    off = Sandbox(writable=[str(repo)], best_effort=True, host_exec_paths=())
    assert off.confinement.read_only == ()


_CALLER = """
import anyio, sys
from sandbox import Sandbox

async def main(workspace):
    box = Sandbox(writable=[workspace])
    await box.run(["bash", "-c", "git init -q && sleep 300"], cwd=workspace)

anyio.run(main, sys.argv[1])
"""


@pytest.mark.parametrize("stop", [signal.SIGTERM, signal.SIGKILL])
def test_what_a_command_planted_is_set_aside_when_its_caller_is_stopped(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, stop: signal.Signals
) -> None:
    # The supervisor sets it aside once the tree is gone, not the caller after the result:
    # an MCP client stops its server with SIGTERM, which runs no cleanup.
    workspace = tmp_path / "ws"
    workspace.mkdir()
    make_box("bubblewrap", workspace, monkeypatch).close()  # skips where it cannot protect
    caller = subprocess.Popen([sys.executable, "-c", _CALLER, str(workspace)])
    try:
        seen = poll(lambda: sorted(p.name for p in workspace.iterdir()), lambda s: ".git" in s)
        assert seen == [".git"], seen
    finally:
        caller.send_signal(stop)
        caller.wait(60)
    seen = poll(lambda: sorted(p.name for p in workspace.iterdir()), lambda s: ".git" not in s)
    assert seen == [".git.sandbox-blocked"], seen
    assert git(workspace, "status").returncode != 0  # no repository left at the root


KEPT_TEXT = (
    "{} is kept from tools and commands in the sandbox (tools on the host, such as git, "
    "direnv or an editor, run what it holds), so it was not written; leave the change to "
    "the user"
)


@pytest.mark.parametrize(
    ("tool", "arguments", "shown"),
    [
        ("write_file", {"path": ".vscode/tasks.json", "content": "{}"}, ".vscode/tasks.json"),
        ("write_file", {"path": "sub/../.husky/pre-commit", "content": "x"}, ".husky/pre-commit"),
        ("edit_file", {"path": ".envrc", "old_text": "A=1", "new_text": "A=2"}, ".envrc"),
        ("write_file", {"path": ".git/hooks/pre-commit", "content": "x"}, ".git/hooks/pre-commit"),
    ],
)
async def test_a_sandboxed_file_tool_refuses_a_kept_path_and_says_so(
    repo: Path, tool: str, arguments: dict[str, Any], shown: str
) -> None:
    # Before: one the child created was set aside after the call (NAME.sandbox-blocked)
    # while its result said it was written.
    (repo / "sub").mkdir()
    box = Sandbox(writable=[str(repo)])
    try:
        tools = {t.name: t for t in workspace_tools(repo, sandbox=box)}
        before = sorted(p.relative_to(repo).as_posix() for p in repo.rglob("*"))
        result = await invoke_tool(tools[tool], arguments)
        assert (result.error_code, result.error) == (
            ErrorCode.PERMISSION_DENIED,
            KEPT_TEXT.format(shown),
        )
        assert sorted(p.relative_to(repo).as_posix() for p in repo.rglob("*")) == before
        assert (repo / ".envrc").read_text() == "export A=1\n"
        read = await invoke_tool(tools["read_file"], {"path": ".envrc"})
        assert read.error is None, read.error
        written = await invoke_tool(tools["write_file"], {"path": "notes.txt", "content": "x"})
        assert written.error is None, written.error
    finally:
        box.close()
