"""Checkpoints around writing steps: what each step changed, restore and undo, the store."""

from __future__ import annotations

import hashlib
import io
import os
import shutil
import stat
import subprocess
import tempfile
from pathlib import Path
from typing import Any

import anyio
import pytest

from tests._waiting import wait_until_async
from workspace_tools import (
    ErrorCode,
    Policy,
    PolicyRule,
    ToolError,
    ToolSession,
    workspace_tools,
)
from workspace_tools.cli._demo import _Printer, _undo_command
from workspace_tools.session._checkpoints import ChangedFile, Checkpoints
from workspace_tools.workspace import Workspace
from workspace_tools.workspace._store import BlobStore, StoreError

# What a model reads when no change is left to undo: never that nothing changed, since
# every change may have been undone already.
UNDONE_ALL = (
    "Nothing to undo: no change of this session is left to undo (no step changed a file, or "
    "each change was undone already)."
)

Tree = dict[str, tuple[Any, ...]]


def tree(root: Path) -> Tree:
    """Every entry below ``root`` as the host sees it: type, mode and bytes (a link: its
    target), ``.git`` left out."""
    out: Tree = {}
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames[:] = sorted(d for d in dirnames if d != ".git")
        for name in [*dirnames, *filenames]:
            path = Path(dirpath, name)
            rel = path.relative_to(root).as_posix()
            st = path.lstat()
            if stat.S_ISLNK(st.st_mode):
                out[rel] = ("link", os.readlink(path))
            elif stat.S_ISDIR(st.st_mode):
                out[rel] = ("dir", stat.S_IMODE(st.st_mode))
            else:
                out[rel] = ("file", stat.S_IMODE(st.st_mode), path.read_bytes())
    return out


def rows(*items: tuple[str, str, str]) -> list[ChangedFile]:
    return [ChangedFile(path=p, change=c, type=t) for p, c, t in items]  # type: ignore[arg-type]


@pytest.fixture
def project(tmp_path: Path) -> Path:
    root = tmp_path / "project"
    (root / "src").mkdir(parents=True)
    (root / "src" / "app.py").write_bytes(b"print('hi')\r\n")
    (root / "notes.txt").write_bytes(b"one\ntwo\n")
    (root / "old.bin").write_bytes(bytes(range(256)))
    (root / "run.sh").write_bytes(b"#!/bin/sh\necho run\n")
    os.chmod(root / "run.sh", 0o755)
    os.symlink("notes.txt", root / "link")
    return root


@pytest.fixture
def session(project: Path, tmp_path: Path) -> ToolSession:
    checkpoints = Checkpoints(Workspace(project), directory=tmp_path / "store")
    return ToolSession(checkpoints.workspace, checkpoints=checkpoints)


COMMAND = (
    "printf 'three\\n' >> notes.txt && printf 'new\\0bytes' > src/new.dat && rm old.bin "
    "&& chmod 600 run.sh && mkdir -p build/out && printf x > build/out/a && ln -sf run.sh link "
    "&& chmod 700 src"
)


def test_command_that_edits_creates_deletes_and_chmods_is_undone_byte_for_byte(
    session: ToolSession, project: Path
) -> None:
    before = tree(project)
    result = session.call_sync("run_command", {"command": COMMAND})
    assert result.content["exit_code"] == 0, result.model_text()
    expected = rows(
        ("build", "created", "directory"),
        ("build/out", "created", "directory"),
        ("build/out/a", "created", "file"),
        ("link", "changed", "symlink"),
        ("notes.txt", "changed", "file"),
        ("old.bin", "deleted", "file"),
        ("run.sh", "changed", "file"),
        ("src", "changed", "directory"),
        ("src/new.dat", "created", "file"),
    )
    assert session.steps[0].changed_files == expected
    assert result.details["changed_files"] == [r.model_dump() for r in expected]
    assert tree(project) != before
    undone = session.undo()
    assert (undone.applied, undone.step, undone.conflicts) == (True, 0, [])
    assert tree(project) == before
    assert session.undo().step is None


def test_read_only_steps_take_no_checkpoint(session: ToolSession) -> None:
    session.call_sync("read_file", {"path": "notes.txt"})
    session.call_sync("write_file", {"path": "notes.txt", "content": "one\n"})
    assert [s.changed_files for s in session.steps] == [
        None,
        rows(("notes.txt", "changed", "file")),
    ]
    assert session.checkpoints is not None
    assert [c.step for c in session.checkpoints.steps] == [1]


def test_restore_with_an_outside_change_refuses_and_lists_it(
    session: ToolSession, project: Path
) -> None:
    session.call_sync("write_file", {"path": "notes.txt", "content": "agent\n"})
    session.call_sync("write_file", {"path": "other.txt", "content": "agent\n"})
    (project / "notes.txt").write_bytes(b"user\n")
    refused = session.restore(0)
    assert (refused.applied, refused.conflicts, refused.files) == (False, ["notes.txt"], [])
    assert refused.model_text().startswith("Not restored: 1 file changed since")
    assert (project / "notes.txt").read_bytes() == b"user\n"
    assert (project / "other.txt").exists()
    # Leaving the conflict out restores the rest.
    partial = session.restore(0, paths=["other.txt"])
    assert (partial.applied, [f.path for f in partial.files]) == (True, ["other.txt"])
    assert not (project / "other.txt").exists()
    forced = session.restore(0, overwrite=True)
    assert (forced.applied, forced.conflicts) == (True, ["notes.txt"])
    assert (project / "notes.txt").read_bytes() == b"one\ntwo\n"


def test_restore_of_a_step_in_the_middle_keeps_the_steps_before_it(
    session: ToolSession, project: Path
) -> None:
    session.call_sync("write_file", {"path": "a.txt", "content": "step 0\n"})
    after_first = tree(project)
    session.call_sync("read_file", {"path": "a.txt"})
    session.call_sync("run_command", {"command": "printf 'step 2\\n' > a.txt && rm notes.txt"})
    session.call_sync("read_file", {"path": "a.txt"})
    edited = session.call_sync("edit_file", {"path": "a.txt", "old_text": "2", "new_text": "4"})
    assert edited.error is None, edited.error
    assert (project / "a.txt").read_bytes() == b"step 4\n"
    result = session.restore(2)
    assert [(f.path, f.change) for f in result.files] == [
        ("a.txt", "changed"),
        ("notes.txt", "created"),
    ]
    assert tree(project) == after_first
    # Steps 2 and 3 are undone: the next undo is step 0's.
    assert session.undo().step == 0
    assert not (project / "a.txt").exists()


def test_dry_run_changes_nothing_and_its_diff_applies_with_git(
    session: ToolSession, project: Path, tmp_path: Path
) -> None:
    session.call_sync(
        "run_command",
        {
            "command": "printf 'one\\nTWO\\n' > notes.txt && chmod 755 notes.txt "
            "&& printf 'made\\n' > made.txt && rm run.sh"
        },
    )
    now = tree(project)
    preview = session.undo(dry_run=True)
    assert (preview.dry_run, preview.applied) == (True, False)
    assert tree(project) == now
    assert preview.diff.startswith("diff --git a/made.txt b/made.txt\ndeleted file mode 100644\n")
    copy = tmp_path / "copy"
    shutil.copytree(project, copy, symlinks=True)
    patch = tmp_path / "undo.diff"
    patch.write_text(preview.diff)
    applied = subprocess.run(
        ["git", "apply", "--unsafe-paths", str(patch)], cwd=copy, capture_output=True, text=True
    )
    assert applied.returncode == 0, applied.stderr
    session.undo()
    # git keeps only the executable bit of a mode; the rest of the tree is the oracle's.
    assert tree(copy) == tree(project)


def test_ignored_directories_and_large_files_are_listed_but_not_stored(
    project: Path, tmp_path: Path
) -> None:
    (project / ".gitignore").write_text("node_modules/\n")
    (project / "node_modules").mkdir()
    (project / "big.dat").write_bytes(b"a" * 2000)
    subprocess.run(["git", "init", "-q", str(project)], check=True)
    checkpoints = Checkpoints(Workspace(project), directory=tmp_path / "store", max_file_bytes=1000)
    session = ToolSession(checkpoints.workspace, checkpoints=checkpoints)
    session.call_sync(
        "run_command",
        {"command": "mkdir node_modules/pkg && printf b >> big.dat && printf c > small.txt"},
    )
    assert session.steps[0].changed_files == [
        ChangedFile(path="big.dat", change="changed", type="file", restorable=False),
        ChangedFile(path="node_modules", change="changed", type="directory", restorable=False),
        ChangedFile(path="small.txt", change="created", type="file"),
    ]
    stored = {
        p.parent.name + p.name for p in (tmp_path / "store" / "objects").rglob("*") if p.is_file()
    }
    contents = [
        (project / name).read_bytes()
        for name in ("src/app.py", "notes.txt", "old.bin", "run.sh", ".gitignore")
    ]
    # The tracked files and the link's target; not big.dat, nothing of .git.
    assert stored == {hashlib.sha256(data).hexdigest() for data in [*contents, b"notes.txt"]}
    assert checkpoints.store.size() == (6, sum(map(len, contents)) + len(b"notes.txt"))
    result = session.undo()
    assert (result.not_restorable, [f.path for f in result.files]) == (
        ["big.dat", "node_modules"],
        ["small.txt"],
    )
    assert (project / "big.dat").stat().st_size == 2001
    assert (project / "node_modules" / "pkg").is_dir()


@pytest.mark.parametrize("with_git", [False, True])
def test_undo_works_with_or_without_git_and_never_touches_git(
    project: Path, with_git: bool
) -> None:
    if with_git:
        subprocess.run(["git", "init", "-q", str(project)], check=True)
        subprocess.run(["git", "-C", str(project), "add", "-A"], check=True)
    git_before = tree(project / ".git") if with_git else {}
    session = ToolSession(project, checkpoints=True)
    assert session.checkpoints is not None
    store = session.checkpoints.store.directory
    assert project not in store.parents
    before = tree(project)
    session.call_sync("run_command", {"command": "rm -r src && printf z > notes.txt"})
    assert session.undo().applied
    assert tree(project) == before
    if with_git:
        assert tree(project / ".git") == git_before
    session.checkpoints.close()
    assert not store.exists()


def test_undo_restores_what_the_session_last_saw_for_later_edits(
    session: ToolSession, project: Path
) -> None:
    session.call_sync("write_file", {"path": "notes.txt", "content": "v1\n"})
    session.call_sync("run_command", {"command": "printf 'v2\\n' > notes.txt"})
    assert session.undo().step == 1
    # The restored content counts as read: an edit against it is not stale.
    edited = session.call_sync(
        "edit_file", {"path": "notes.txt", "old_text": "v1", "new_text": "v3"}
    )
    assert edited.error is None, edited.error
    # A restore through the Python API is no step: the edit is step 2.
    assert session.undo().step == 2
    assert session.undo().step == 0
    assert (project / "notes.txt").read_bytes() == b"one\ntwo\n"


def test_undo_tool_runs_through_policy_and_records_its_changes(
    project: Path,
) -> None:
    session = ToolSession(project, checkpoints=True)
    undo = session.undo_tool()
    session.call_sync("run_command", {"command": "printf n > new.txt && rm notes.txt"})
    result = session.call_sync(undo, {})
    assert result.error is None, result.error
    assert result.model_text() == (
        "Restored 2 paths as before step 0:\n  deleted new.txt\n  created notes.txt"
    )
    assert session.steps[1].changed_files == rows(
        ("new.txt", "deleted", "file"), ("notes.txt", "created", "file")
    )
    assert session.call_sync(undo, {}).model_text() == UNDONE_ALL
    denying = ToolSession(
        project,
        checkpoints=True,
        policy=Policy(rules=[PolicyRule(name="no writes", decision="deny", read_only=False)]),
    )
    refused = denying.call_sync(denying.undo_tool(), {})
    assert (refused.error_code, refused.error) == (
        ErrorCode.PERMISSION_DENIED,
        "Not run: policy rule 'no writes' denies this undo call.",
    )


def test_undo_tool_reports_a_conflict_as_stale_file(session: ToolSession, project: Path) -> None:
    session.call_sync("write_file", {"path": "notes.txt", "content": "agent\n"})
    (project / "notes.txt").write_bytes(b"user\n")
    result = session.call_sync(session.undo_tool(), {})
    assert result.error_code is ErrorCode.STALE_FILE
    assert result.error == (
        "Not restored: 1 file changed since the session's steps left them (by someone "
        "else); nothing was changed. Restore them anyway with overwrite, or leave them out "
        "with paths:\n  notes.txt"
    )


def test_restore_refuses_bad_arguments(session: ToolSession) -> None:
    with pytest.raises(ToolError) as none_yet:
        session.restore(0)
    assert (none_yet.value.code, none_yet.value.message) == (
        ErrorCode.INVALID_ARGUMENTS,
        "step 0 is not a step of this session: it has taken no step yet",
    )
    written = session.call_sync("write_file", {"path": "typo.txt", "content": "x\n"})
    assert written.error is None, written.error
    with pytest.raises(ToolError) as beyond:
        session.restore(3)
    assert (beyond.value.code, beyond.value.message) == (
        ErrorCode.INVALID_ARGUMENTS,
        "step 3 is not a step of this session: its steps are 0 to 0",
    )
    with pytest.raises(ToolError) as negative:
        session.restore(-1)
    assert negative.value.code is ErrorCode.INVALID_ARGUMENTS
    with pytest.raises(ToolError) as outside:
        session.restore(0, paths=["../elsewhere"])
    assert outside.value.code is ErrorCode.OUTSIDE_WORKSPACE
    with pytest.raises(RuntimeError):
        ToolSession(session.workspace or ".", checkpoints=False).undo()


def test_store_inside_the_workspace_or_a_git_directory_is_refused(project: Path) -> None:
    with pytest.raises(ValueError, match="must be outside the workspace"):
        BlobStore(project / "store", project)
    with pytest.raises(ValueError, match=r"inside a \.git directory"):
        BlobStore(project.parent / "repo" / ".git" / "store", project)


def test_store_is_never_read_half_written(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    store = BlobStore(tmp_path / "store", tmp_path / "ws")
    digest = store.put(b"whole")
    assert store.get(digest) == b"whole"

    def crash(*args: object, **kwargs: object) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, "replace", crash)
    with pytest.raises(OSError):
        store.put(b"never whole")
    monkeypatch.undo()
    leftovers = [p for p in (tmp_path / "store").rglob("*") if p.is_file()]
    assert [p.read_bytes() for p in leftovers] == [b"whole"]
    # A blob damaged by something else is reported, never handed back.
    blob = next(p for p in leftovers)
    blob.write_bytes(b"whole but changed")
    with pytest.raises(StoreError, match="is damaged"):
        store.get(digest)


def test_a_damaged_store_makes_restore_fail_with_a_clear_error_and_change_nothing(
    session: ToolSession, project: Path, tmp_path: Path
) -> None:
    session.call_sync("run_command", {"command": "printf agent > notes.txt && rm run.sh"})
    digest = hashlib.sha256(b"#!/bin/sh\necho run\n").hexdigest()
    (tmp_path / "store" / "objects" / digest[:2] / digest[2:]).write_bytes(b"garbage")
    with pytest.raises(ToolError) as caught:
        session.undo()
    assert caught.value.code is ErrorCode.TOOL_ERROR
    assert caught.value.message == (
        f"Cannot restore: blob {digest} is damaged: its bytes no longer match its hash"
    )
    # notes.txt's content is whole and comes first, yet nothing was restored: the store is
    # checked before any change.
    assert (project / "notes.txt").read_bytes() == b"agent"
    assert not (project / "run.sh").exists()


def test_store_made_by_the_session_is_removed_unless_kept(project: Path, tmp_path: Path) -> None:
    kept = Checkpoints(Workspace(project), keep=True)
    gone = Checkpoints(Workspace(project))
    kept.before()
    gone.before()
    kept.close()
    gone.close()
    assert kept.store.directory.is_dir()
    assert not gone.store.directory.exists()
    shutil.rmtree(kept.store.directory)


def test_directories_holding_what_restore_leaves_are_kept_and_listed(
    session: ToolSession, project: Path
) -> None:
    (project / ".gitignore").write_text("__pycache__/\n")
    session.call_sync(
        "run_command",
        {
            "command": "mkdir -p pkg/__pycache__ out && printf m > pkg/mod.py "
            "&& printf c > pkg/__pycache__/mod.pyc && printf o > out/o.txt"
        },
    )
    assert session.steps[0].changed_files == [
        ChangedFile(path="out", change="created", type="directory"),
        ChangedFile(path="out/o.txt", change="created", type="file"),
        ChangedFile(path="pkg", change="created", type="directory"),
        ChangedFile(path="pkg/__pycache__", change="created", type="directory", restorable=False),
        ChangedFile(path="pkg/mod.py", change="created", type="file"),
    ]
    (project / "out" / "mine.txt").write_bytes(b"the user's")
    result = session.undo()
    assert (result.applied, result.conflicts) == (True, [])
    assert result.not_restorable == ["out", "pkg", "pkg/__pycache__"]
    assert [f.path for f in result.files] == ["out/o.txt", "pkg/mod.py"]
    assert (project / "out" / "mine.txt").read_bytes() == b"the user's"
    assert (project / "pkg" / "__pycache__" / "mod.pyc").read_bytes() == b"c"
    assert not (project / "pkg" / "mod.py").exists()
    assert not (project / "out" / "o.txt").exists()


def test_demo_step_lists_what_a_command_changed_and_undoes_it(tmp_path: Path) -> None:
    (tmp_path / "NOTES.md").write_bytes(b"notes\n")
    before = tree(tmp_path)
    out = io.StringIO()
    failed = anyio.run(_undo_command, tmp_path, "NOTES.md", _Printer(out), 12)
    assert (failed, out.getvalue().splitlines()) == (
        0,
        [
            "",
            "12. a command changes files; undo brings them back",
            "● Run command [terminal] printf 'scratch\\n' > scratch.txt && chmod +x scratch.txt"
            " && rm NOTES.md",
            "  deleted NOTES.md",
            "  created scratch.txt",
            "  undo:",
            "    created NOTES.md",
            "    deleted scratch.txt",
            "  the workspace is as before",
        ],
    )
    assert tree(tmp_path) == before


def test_checkpoints_take_the_workspace_the_tools_carry(project: Path) -> None:
    tools = workspace_tools(project)
    with ToolSession(tools, checkpoints=True) as session:
        assert session.workspace is tools[0].workspace
        written = session.call_sync("write_file", {"path": "notes.txt", "content": "changed\n"})
        assert written.error is None, written.error
        assert session.undo().applied is True
    assert (project / "notes.txt").read_bytes() == b"one\ntwo\n"


def test_checkpoints_need_one_workspace_when_the_tools_carry_two(project: Path) -> None:
    other = project / "sub"
    other.mkdir()
    mixed = [*workspace_tools(project)[:1], *workspace_tools(other)[1:]]
    with pytest.raises(ValueError) as raised:
        ToolSession(mixed, checkpoints=True)
    assert str(raised.value) == (
        "checkpoints need the session's workspace: pass workspace=, the Workspace the tools "
        "were built with (these tools carry none, or more than one)"
    )


def test_store_goes_outside_a_workspace_that_holds_the_temp_directory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    root = tmp_path / "ws"
    (root / "tmp").mkdir(parents=True)
    monkeypatch.setattr(tempfile, "tempdir", str(root / "tmp"))
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    store = BlobStore(None, root)
    assert store.directory.parent == tmp_path / "cache"
    assert list((root / "tmp").iterdir()) == []
    store.close()
    monkeypatch.setenv("XDG_CACHE_HOME", str(root / "cache"))
    with pytest.raises(ValueError, match=r"no place outside the workspace"):
        BlobStore(None, root)
    assert list((root / "tmp").iterdir()) == []


@pytest.mark.anyio
async def test_a_cancelled_command_still_lists_what_it_changed(
    session: ToolSession, project: Path
) -> None:
    command = "printf x > started.txt && sleep 60"
    async with anyio.create_task_group() as group:
        group.start_soon(session.call, "run_command", {"command": command})
        await wait_until_async(
            lambda: (project / "started.txt").exists(), bool, "the command to write its file"
        )
        group.cancel_scope.cancel()
    [step] = session.steps
    assert (step.failed, step.changed_files) == (True, rows(("started.txt", "created", "file")))
    assert session.undo().applied
    assert not (project / "started.txt").exists()


def test_a_restore_leaves_what_a_sandbox_set_aside_whoever_restores(tmp_path: Path) -> None:
    # A sandboxed shell wrote `.envrc` and `.vscode/tasks.json` (step 0); its end set
    # them aside (step 1). A restore of step 1, whatever started it (the CLI's `restore`,
    # checkpoints without a session), must not put them back where direnv and the editor
    # run them: the set-aside copies say a sandbox kept them from its commands.
    root = tmp_path / "work"
    root.mkdir()
    (root / "a.txt").write_bytes(b"a\n")
    checkpoints = Checkpoints(Workspace(root))
    checkpoints.before()
    (root / ".envrc").write_bytes(b"echo planted\n")
    (root / ".vscode").mkdir()
    (root / ".vscode" / "tasks.json").write_bytes(b"{}\n")
    (root / "a.txt").write_bytes(b"b\n")
    checkpoints.after(0)
    checkpoints.before()
    os.rename(root / ".envrc", root / ".envrc.sandbox-blocked")
    os.rename(root / ".vscode", root / ".vscode.sandbox-blocked-0a1b2c3d")
    (root / "a.txt").write_bytes(b"c\n")
    checkpoints.after(1)
    before = tree(root)

    result = checkpoints.restore(1)

    assert result.applied
    assert [(f.change, f.path) for f in result.files] == [("changed", "a.txt")]
    assert result.protected == [
        ".envrc",
        ".envrc.sandbox-blocked",
        ".vscode",
        ".vscode.sandbox-blocked-0a1b2c3d",
        ".vscode.sandbox-blocked-0a1b2c3d/tasks.json",
        ".vscode/tasks.json",
    ]
    assert tree(root) == {**before, "a.txt": (*before["a.txt"][:2], b"b\n")}
    checkpoints.close()


def test_a_restore_quotes_names_that_could_pass_for_other_lines(tmp_path: Path) -> None:
    root = tmp_path / "work"
    root.mkdir()
    checkpoints = Checkpoints(Workspace(root))
    checkpoints.before()
    (root / "build.log\n  deleted auth.py").write_bytes(b"x\n")
    checkpoints.after(0)

    result = checkpoints.restore(0)

    assert result.model_text() == (
        'Restored 1 path as before step 0:\n  deleted "build.log\\n  deleted auth.py"'
    )
    checkpoints.close()


def test_a_restored_file_loses_its_set_id_bits(session: ToolSession, project: Path) -> None:
    # The restored file is a new one, the restorer's (root's, as agents often run): with
    # its set-user-ID bit a program of another user's would run as root for anyone.
    for name, mode in (("suid", 0o4755), ("sgid", 0o2750), ("plain", 0o750)):
        (project / name).write_bytes(b"#!/bin/sh\nid\n")
        os.chmod(project / name, mode)
    result = session.call_sync("run_command", {"command": "rm suid sgid plain"})
    assert result.content["exit_code"] == 0, result.model_text()
    undone = session.undo()
    assert (undone.applied, undone.conflicts) == (True, []), undone
    modes = {name: stat.S_IMODE((project / name).stat().st_mode) for name in ("suid", "sgid")}
    assert modes == {"suid": 0o755, "sgid": 0o750}
    assert stat.S_IMODE((project / "plain").stat().st_mode) == 0o750
    assert (project / "suid").read_bytes() == b"#!/bin/sh\nid\n"
    # The next step's changes are still the step's own, and undone as well.
    session.call_sync("run_command", {"command": "printf x > new.txt"})
    assert [f.path for f in session.steps[-1].changed_files] == ["new.txt"]
    assert session.undo().applied
    assert not (project / "new.txt").exists()
