"""A protected path stays protected when the child moves what leads to it.

The layers bind a read-only or read-denied path where it is when the child starts. The
kernel refuses to rename a mount point (EBUSY), but not a directory above one: a command
that renamed `config` carried a denied `config/secrets.env` to `cfg/`, where the next
command's layers did not look, and one that renamed `scripts` put a hooks directory of its
own where `core.hooksPath` points. And the supervisor's setting aside of a protected path
the command created renamed by path, through a link the command put on the way.

Each case runs the move in the sandbox, then looks at the host (the secret's bytes in the
output, real git committing, the host directory a link pointed to). Control runs (no
layers, or the protection turned off) show the move works and the attack would succeed.
"""

from __future__ import annotations

import errno
import os
import stat
from pathlib import Path
from typing import Any

import pytest

from sandbox import Sandbox
from sandbox._defaults import guards, set_aside
from sandbox.layers import HOST_EXEC_PROTECTION, READ_DENIAL
from sandbox.layers._confinement import pinned_directories
from tests.sandbox._boxes import force_landlock
from tests.sandbox.test_protected_paths import GIT_ENV, MODES, git, make_box

pytestmark = pytest.mark.anyio

SECRET = "API_KEY=hunter2-7f3a"


def denying_box(mode: str, workspace: Path, monkeypatch: pytest.MonkeyPatch) -> Sandbox:
    """A sandbox denying ``config/secrets.env`` in the workspace; "plain" is the control."""
    denied = str(workspace / "config" / "secrets.env")
    if mode == "plain":
        return Sandbox(layers=False, network=True)
    if mode == "landlock":
        force_landlock(monkeypatch)
    try:
        box = Sandbox(writable=[str(workspace)], read_denied=[denied])
    except Exception as exc:  # SandboxUnavailable: the layer is missing here
        pytest.skip(str(exc))
    if READ_DENIAL not in box.capabilities:
        pytest.skip(f"commands get no read denial here: {box.capabilities}")
    return box


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    path = tmp_path / "ws"
    path.mkdir()
    assert git(path, "init", "-q").returncode == 0
    (path / "README").write_text("hello\n")
    (path / ".envrc").write_text("export A=1\n")
    assert git(path, "add", "README", ".envrc").returncode == 0
    assert git(path, "commit", "-q", "-m", "first").returncode == 0
    return path


@pytest.fixture
def secret_workspace(tmp_path: Path) -> Path:
    workspace = tmp_path / "ws"
    (workspace / "config").mkdir(parents=True)
    (workspace / "config" / "secrets.env").write_text(SECRET + "\n")
    (workspace / "config" / "app.toml").write_text("debug = true\n")
    return workspace


@pytest.mark.parametrize("mode", ["plain", "bubblewrap", "landlock"])
async def test_a_denied_file_cannot_be_carried_out_by_renaming_its_directory(
    secret_workspace: Path, mode: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    box = denying_box(mode, secret_workspace, monkeypatch)
    cwd = str(secret_workspace)
    moved = await box.run(["sh", "-c", "mv config cfg; echo $?"], cwd=cwd)
    read = await box.run(["sh", "-c", "cat cfg/secrets.env config/secrets.env"], cwd=cwd)
    # The directory's other files stay writable: only its name is held.
    edited = await box.run(["sh", "-c", "echo x >> config/app.toml; echo $?"], cwd=cwd)

    protected = mode != "plain"
    shown = read.stdout.complete.decode() + read.stderr.complete.decode()
    assert (SECRET in shown) is not protected, shown
    assert moved.stdout.complete == (b"1\n" if protected else b"0\n"), moved.stderr.complete
    if protected:
        assert b"Device or resource busy" in moved.stderr.complete, moved.stderr.complete
        assert sorted(os.listdir(secret_workspace)) == ["config"]
        assert edited.stdout.complete == b"0\n", edited.stderr.complete
    box.close()


@pytest.mark.parametrize("mode", ["plain", "bubblewrap", "landlock"])
async def test_a_call_cannot_rename_a_denied_files_directory(
    secret_workspace: Path, mode: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    box = denying_box(mode, secret_workspace, monkeypatch)
    if mode != "plain" and HOST_EXEC_PROTECTION not in box.call_capabilities:
        pytest.skip(f"calls get no mount namespace here: {box.call_capabilities}")

    def rename(workspace: str) -> str:
        try:
            os.rename(f"{workspace}/config", f"{workspace}/cfg")
        except OSError as exc:
            return errno.errorcode[exc.errno or 0]
        return "renamed"

    outcome = await box.call(rename, str(secret_workspace))
    box.close()
    assert outcome == ("renamed" if mode == "plain" else "EBUSY")


@pytest.mark.parametrize("mode", MODES)
async def test_a_nested_hooks_directory_cannot_be_swapped_for_one_of_the_commands(
    repo: Path, tmp_path: Path, mode: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    hooks = repo / "scripts" / "hooks"
    hooks.mkdir(parents=True)
    (hooks / "README").write_text("shared hooks\n")
    assert git(repo, "config", "core.hooksPath", "scripts/hooks").returncode == 0
    box = make_box(mode, repo, monkeypatch)
    marker = tmp_path / "hook-ran"
    script = (
        'mv scripts scripts.old; echo "mv $?"; mkdir -p scripts/hooks && '
        f"printf '#!/bin/sh\\ntouch {marker}\\n' > scripts/hooks/pre-commit && "
        'chmod +x scripts/hooks/pre-commit; echo "plant $?"'
    )
    result = await box.run(["sh", "-c", script], cwd=str(repo), env=GIT_ENV)
    box.close()

    protected = mode in ("bubblewrap", "landlock")
    # Protected: the rename is refused, and the plant fails on the read-only hooks.
    assert result.stdout.complete.decode() == (
        "mv 1\nplant 2\n" if protected else "mv 0\nplant 0\n"
    ), result.stderr.complete
    (repo / "notes.txt").write_text("work\n")
    git(repo, "add", "notes.txt")
    commit = git(repo, "commit", "-q", "-m", "agent work")
    assert commit.returncode == 0, commit.stderr
    assert marker.exists() is not protected


@pytest.mark.parametrize("mode", MODES)
async def test_setting_aside_follows_no_link_the_command_made(
    repo: Path, tmp_path: Path, mode: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # core.hooksPath = ci/hooks, absent at the start: what the command makes there is set
    # aside after it. A link `ci` to a host directory must not turn that rename onto the
    # host's `hooks`.
    assert git(repo, "config", "core.hooksPath", "ci/hooks").returncode == 0
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "hooks").write_text("a host file\n")
    box = make_box(mode, repo, monkeypatch)
    result = await box.run(["sh", "-c", f"ln -s {outside} ci; echo $?"], cwd=str(repo))
    box.close()

    assert result.stdout.complete == b"0\n", result.stderr.complete
    assert sorted(os.listdir(outside)) == ["hooks"]
    assert (outside / "hooks").read_text() == "a host file\n"
    protected = mode in ("bubblewrap", "landlock")
    link = repo / ("ci.sandbox-blocked" if protected else "ci")
    assert os.readlink(link) == str(outside)
    assert (repo / "ci").exists() is not protected


@pytest.mark.parametrize("mode", MODES)
async def test_a_protected_link_the_command_replaced_is_set_aside(
    repo: Path, tmp_path: Path, mode: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # `.envrc` is a link to a file of the project: the layers bind its target read-only,
    # and the link itself sits in a writable directory.
    (repo / ".envrc").unlink()
    (repo / "envrc.shared").write_text("export A=1\n")
    (repo / ".envrc").symlink_to("envrc.shared")
    box = make_box(mode, repo, monkeypatch)
    script = f"rm .envrc && echo 'touch {tmp_path}/envrc-ran' > .envrc; echo $?"
    result = await box.run(["sh", "-c", script], cwd=str(repo))
    box.close()

    assert result.stdout.complete == b"0\n", result.stderr.complete
    protected = mode in ("bubblewrap", "landlock")
    assert (repo / "envrc.shared").read_text() == "export A=1\n"
    if protected:
        assert not os.path.lexists(repo / ".envrc")
        assert (repo / ".envrc.sandbox-blocked").read_text() == f"touch {tmp_path}/envrc-ran\n"
    else:
        assert (repo / ".envrc").read_text() == f"touch {tmp_path}/envrc-ran\n"


def test_pinned_directories_are_those_between_a_protected_path_and_its_writable_dir(
    tmp_path: Path,
) -> None:
    root = tmp_path / "ws"
    for path in ("a/b/c", "a/d", "e/f", "g"):
        (root / path).mkdir(parents=True)
    (root / "a/b/c/key").write_text("k\n")
    outside = tmp_path / "home"
    (outside / ".config/gh").mkdir(parents=True)
    real = str(root.resolve())

    pinned = pinned_directories(
        [str(root)],
        read_only=[str(root / "e/f"), str(root / "g"), str(root / "absent/x")],
        read_denied=[str(root / "a/b/c/key"), str(root / "a/d"), str(outside / ".config/gh")],
    )

    assert pinned == [f"{real}/a", f"{real}/e", f"{real}/a/b", f"{real}/a/b/c"]
    # Beneath a read-only or denied path there is nothing to pin: it cannot move already.
    assert pinned_directories([str(root)], [str(root / "a")], [str(root / "a/b/c/key")]) == []
    # A child that may write anywhere gets none.
    assert pinned_directories(["/"], [str(root / "a/b/c")]) == []


def test_set_aside_renames_the_first_name_that_changed_and_follows_no_link(
    tmp_path: Path,
) -> None:
    root = tmp_path / "ws"
    (root / "kept/hooks").mkdir(parents=True)
    (root / "swapped").mkdir()
    outside = tmp_path / "outside"
    (outside / "hooks").mkdir(parents=True)
    protected = [
        str(root / "kept/hooks"),  # exists: bound and pinned, so a change is the host's
        str(root / "swapped/hooks"),  # its directory swapped for a link out
        str(root / "made/hooks"),  # created, with its directory
        str(root / "removed"),  # absent before and after
        str(root / "kept/new"),  # created in an unchanged directory
    ]
    before: Any = guards(protected, [str(root)])
    assert [(r, names, len(known)) for r, names, known in before] == [
        (str(root), ("swapped", "hooks"), 1),
        (str(root), ("made", "hooks"), 0),
        (str(root), ("removed",), 0),
        (str(root), ("kept", "new"), 1),
    ]
    (root / "swapped").rmdir()
    (root / "swapped").symlink_to(outside)
    (root / "made/hooks").mkdir(parents=True)
    (root / "kept/new").write_text("x\n")
    (root / "kept/hooks").rmdir()  # the host's own change (a child's would be EBUSY)
    (root / "kept/hooks").mkdir()

    moved = set_aside(before)

    assert moved == [
        str(root / "swapped.sandbox-blocked"),
        str(root / "made.sandbox-blocked"),
        str(root / "kept/new.sandbox-blocked"),
    ]
    assert sorted(os.listdir(outside)) == ["hooks"]
    assert stat.S_ISLNK(os.lstat(root / "swapped.sandbox-blocked").st_mode)
    assert sorted(os.listdir(root)) == ["kept", "made.sandbox-blocked", "swapped.sandbox-blocked"]
    assert sorted(os.listdir(root / "kept")) == ["hooks", "new.sandbox-blocked"]


def test_a_link_swapped_for_one_to_elsewhere_is_set_aside_even_on_the_same_inode(
    tmp_path: Path,
) -> None:
    # ext4 gives a link made right after one was removed the same inode number back: the
    # identity of a link holds its target too.
    root = tmp_path / "ws"
    root.mkdir()
    (root / "real.git").mkdir()
    (root / "fake.git").mkdir()
    (root / ".git").symlink_to("real.git")
    before = guards([str(root / ".git")], [str(root)])
    inode = os.lstat(root / ".git").st_ino
    (root / ".git").unlink()
    (root / ".git").symlink_to("fake.git")
    reused = os.lstat(root / ".git").st_ino == inode

    assert set_aside(before) == [str(root / ".git.sandbox-blocked")], f"inode reused: {reused}"
    assert os.readlink(root / ".git.sandbox-blocked") == "fake.git"
    assert not os.path.lexists(root / ".git")
