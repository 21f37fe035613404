"""Workspaces as Ray actors, on a real local Ray cluster (one per module: it takes seconds)."""

from __future__ import annotations

import dataclasses
import io
import os
import shutil
import subprocess
import tarfile
import threading
import uuid
from collections.abc import Iterator
from functools import partial
from pathlib import Path
from typing import Any

import anyio
import pytest

from tests._waiting import wait_until
from tests.remote._calls import CODES, TOOLS, comparable, named, populate, run_all
from tests.remote._served import processes_with_argument, wait_gone
from workspace_tools import (
    ErrorCode,
    ToolResult,
    ToolSession,
    invoke_tool,
    invoke_tool_sync,
    tool,
)
from workspace_tools import workspace_tools as local_workspace_tools
from workspace_tools.tools.read_file import ReadFileArgs

ray = pytest.importorskip("ray", reason="ray is not installed (the [ray] extra)")
from workspace_tools.adapters.ray import RayWorkspace, run_episodes  # noqa: E402

SMALL = {"num_cpus": 0.1}  # many actors on a two-CPU cluster, none left pending


@pytest.fixture(scope="module", autouse=True)
def cluster() -> Iterator[None]:
    try:
        ray.init(num_cpus=2, include_dashboard=False, address="local", log_to_driver=False)
    except Exception as exc:  # pragma: no cover - depends on the host
        pytest.skip(f"a local Ray cluster cannot start here: {exc}")
    yield
    ray.shutdown()


@pytest.fixture
def project(tmp_path: Path) -> Path:
    source = tmp_path / "project"
    (source / "src").mkdir(parents=True)
    (source / "README.md").write_bytes(b"# demo\n\nhello\n")
    (source / "src" / "main.py").write_bytes(b"print('hi')\n")
    return source


def test_every_tool_through_an_actor_gives_the_local_results(tmp_path: Path) -> None:
    source = tmp_path / "source"
    source.mkdir()
    populate(source)
    local_root = tmp_path / "local"
    shutil.copytree(source, local_root, symlinks=True)
    workspace = RayWorkspace(source, actor_options=SMALL)
    try:
        assert [t.name for t in workspace.tools] == TOOLS
        actor_root = Path(workspace.root())
        assert actor_root != source
        got = run_all(workspace.tools, actor_root)
        want = run_all(local_workspace_tools(local_root), local_root)
        for remote_result, local_result in zip(got, want, strict=True):
            assert comparable(remote_result) == comparable(local_result)
            # The details models themselves cross, not their JSON.
            assert type(remote_result.details) is type(local_result.details)
        assert [r.error_code for r in got] == CODES
        assert (actor_root / "eq/new/hello.py").read_bytes() == b"print('patched')\n"
        assert not (source / "eq/new").exists()
    finally:
        workspace.close()
    assert not actor_root.exists()


def test_progress_streams_back_from_the_actor(project: Path) -> None:
    workspace = RayWorkspace(project, actor_options=SMALL)
    try:
        updates: list[Any] = []
        command = "for i in 1 2 3; do echo line$i; sleep 0.2; done"
        result = invoke_tool_sync(
            named(workspace.tools), {"command": command}, on_update=updates.append
        )
        assert result.content == {"exit_code": 0, "stdout": "line1\nline2\nline3\n", "stderr": ""}
        assert "".join(u.content for u in updates) == "line1\nline2\nline3\n", updates
        session = ToolSession(workspace.tools)
        read = session.call_sync("read_file", {"path": "README.md"})
        assert read.model_text() == "     1\t# demo\n     2\t\n     3\thello"
    finally:
        workspace.close()


def test_a_sandboxed_write_outside_the_root_is_refused_inside_the_actor(
    project: Path,
) -> None:
    if shutil.which("bwrap") is None:
        pytest.skip("bubblewrap is not installed")
    # Not under /tmp, which the sandbox replaces with a private one.
    outside = Path("/var/tmp") / f"escaped-{uuid.uuid4().hex}.txt"
    workspace = RayWorkspace(project, sandbox=True, actor_options=SMALL)
    try:
        command = f"touch {outside}; echo inside > inside.txt; cat inside.txt"
        result = invoke_tool_sync(named(workspace.tools), {"command": command})
        assert result.content == {
            "exit_code": 0,
            "stdout": "inside\n",
            "stderr": f"touch: cannot touch '{outside}': Read-only file system\n",
        }
        assert not outside.exists()
        write = invoke_tool_sync(workspace.tools[1], {"path": "../escaped.txt", "content": "x"})
        assert write.error_code is ErrorCode.OUTSIDE_WORKSPACE
    finally:
        workspace.close()


def test_an_actor_killed_mid_call_is_an_error_naming_it_and_can_be_recreated(
    project: Path,
) -> None:
    name = f"workspace-{uuid.uuid4().hex[:8]}"
    marker = f"{30 + uuid.uuid4().int % 1000 / 1000:.3f}"
    workspace = RayWorkspace(project, name=name, actor_options=SMALL)
    try:
        tools = {t.name: t for t in workspace.tools}
        invoke_tool_sync(tools["write_file"], {"path": "scratch.txt", "content": "x"})
        outcome: list[ToolResult] = []
        caller = threading.Thread(
            target=lambda: outcome.append(
                invoke_tool_sync(tools["run_command"], {"command": f"sleep {marker}"})
            )
        )
        caller.start()
        wait_until(lambda: processes_with_argument(marker), bool, "the command to start")
        ray.kill(workspace.handle)
        caller.join(timeout=60)
        assert not caller.is_alive(), "the call hung after the actor died"
        assert outcome[0].error_code is ErrorCode.WORKSPACE_UNAVAILABLE
        assert outcome[0].error == (
            f"The workspace '{name}' died: The actor died unexpectedly before finishing this "
            "task. The actor is dead because it was killed by `ray.kill`; recreate it "
            "(RayWorkspace.recreate) to go on with a fresh copy"
        )
        wait_gone(marker)
        after = invoke_tool_sync(tools["read_file"], {"path": "README.md"})
        assert after.error_code is ErrorCode.WORKSPACE_UNAVAILABLE
        workspace.recreate()
        again = invoke_tool_sync(tools["read_file"], {"path": "README.md", "limit": 1})
        assert again.error is None, again.error
        assert again.content.startswith("     1\t# demo\n")
        fresh = invoke_tool_sync(tools["read_file"], {"path": "scratch.txt"})
        assert fresh.error_code is ErrorCode.NOT_FOUND
    finally:
        workspace.close()


def test_a_source_missing_on_the_node_is_an_error_result(tmp_path: Path) -> None:
    missing = tmp_path / "missing"
    workspace = RayWorkspace(missing, actor_options=SMALL)
    try:
        result = invoke_tool_sync(workspace.tools[0], {"path": "README.md"})
        assert result.error_code is ErrorCode.WORKSPACE_UNAVAILABLE
        assert result.error == (
            f"The workspace {workspace.label} could not start: "
            f"FileNotFoundError: workspace source not found on this node: {missing}"
        )
    finally:
        workspace.close()


def test_run_episodes_gives_each_its_own_workspace(project: Path, tmp_path: Path) -> None:
    archive = tmp_path / "project.tar.gz"
    with tarfile.open(archive, "w:gz") as tar:
        tar.add(project, arcname=".")
    zipped = shutil.make_archive(str(tmp_path / "project"), "zip", project)
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w") as tar:
        tar.add(project, arcname=".")
    sources = [project, archive, zipped, buffer.getvalue()]
    roots: list[str] = []

    async def episode(index: int, tools: list[Any]) -> str:
        by_name = {t.name: t for t in tools}
        await invoke_tool(by_name["write_file"], {"path": "episode.txt", "content": f"{index}\n"})
        listed = await invoke_tool(by_name["run_command"], {"command": "pwd; cat episode.txt"})
        roots.append(listed.content["stdout"].splitlines()[0])
        found = await invoke_tool(by_name["grep"], {"pattern": "hello|hi"})
        return f"{listed.content['stdout'].splitlines()[1]} {found.content}"

    results = anyio.run(partial(run_episodes, episode, sources, actor_options=SMALL))
    assert results == [
        f"{i} README.md:3:hello\nsrc/main.py:1:print('hi')" for i in range(len(sources))
    ]
    assert len(set(roots)) == len(sources), roots
    assert [Path(root).exists() for root in roots] == [False] * len(sources)


def test_an_error_raised_in_the_actor_is_a_tool_error_and_the_actor_lives_on(
    project: Path,
) -> None:
    workspace = RayWorkspace(project, actor_options=SMALL)
    try:
        # A tool the actor does not hold: its method raises KeyError, the actor stays up.
        unknown = tool(
            name="unknown_tool",
            description="not served",
            parameters=ReadFileArgs,
            execute=lambda args, context: None,
        )
        routed = dataclasses.replace(unknown, execute=workspace._execute(unknown))
        failed = invoke_tool_sync(routed, {"path": "README.md"})
        assert (failed.error_code, failed.error) == (
            ErrorCode.TOOL_ERROR,
            f"The workspace {workspace.label} failed the call: KeyError: 'unknown_tool'",
        )
        after = invoke_tool_sync(workspace.tools[0], {"path": "README.md", "limit": 1})
        assert after.error is None, after.error
    finally:
        workspace.close()


def test_a_killed_actors_root_is_removed(project: Path) -> None:
    workspace = RayWorkspace(project, actor_options=SMALL)
    root = Path(workspace.root())
    owner = Path(f"{root}.owner")
    assert (root / "README.md").read_bytes() == b"# demo\n\nhello\n"
    assert owner.exists()
    ray.kill(workspace.handle, no_restart=True)
    # The actor's process ends some time after ray.kill; its watcher removes the root then.
    wait_until(
        lambda: (root.exists(), owner.exists()), lambda seen: seen == (False, False), str(root)
    )
    workspace.close()  # an actor already dead is fine


def test_roots_whose_owner_is_gone_are_swept_by_the_next_actor(project: Path) -> None:
    first = RayWorkspace(project, actor_options=SMALL)
    directory = Path(first.root()).parent
    first.close()
    # A root left behind with its watcher gone (say, the node restarted): its owner file
    # names a process that has ended (a finished child's pid; start time 0 is no process's).
    ended = subprocess.Popen(["true"])
    ended.wait()
    left = directory / f"workspace-left-{uuid.uuid4().hex[:8]}"
    (left / "sub").mkdir(parents=True)
    (left / "sub" / "file").write_bytes(b"x")
    Path(f"{left}.owner").write_text(f"{ended.pid} 0\n")
    # A root whose owner lives (this process, with its start time) is kept.
    kept = directory / f"workspace-kept-{uuid.uuid4().hex[:8]}"
    kept.mkdir()
    start_time = int(Path("/proc/self/stat").read_bytes().rsplit(b")", 1)[1].split()[19])
    Path(f"{kept}.owner").write_text(f"{os.getpid()} {start_time}\n")
    try:
        second = RayWorkspace(project, actor_options=SMALL)
        try:
            assert Path(second.root()).parent == directory
            seen = (left.exists(), Path(f"{left}.owner").exists(), kept.exists())
            assert seen == (False, False, True), seen
        finally:
            second.close()
    finally:
        shutil.rmtree(kept, ignore_errors=True)
        Path(f"{kept}.owner").unlink(missing_ok=True)
