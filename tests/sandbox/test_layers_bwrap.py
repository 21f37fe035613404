"""bubblewrap layer: the argv it builds and what it guarantees beyond the shared promises."""

from __future__ import annotations

import os
import secrets
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from sandbox.layers import bwrap
from sandbox.layers._confinement import Confinement
from tests._processes import marked_processes, survivors
from tests._waiting import wait_until

_MISSING = bwrap.available()
pytestmark = pytest.mark.skipif(_MISSING is not None, reason=str(_MISSING))

ENV = {"PATH": os.environ.get("PATH", "/usr/bin:/bin")}


@pytest.fixture
def workspace() -> Iterator[Path]:
    path = Path(f"/var/tmp/bwrap-{secrets.token_hex(6)}")
    path.mkdir()
    yield path
    for child in path.iterdir():
        child.unlink()
    path.rmdir()


def test_killing_bwrap_kills_the_whole_command_tree(workspace: Path) -> None:
    marker = f"SANDBOX_LAYER_MARK={secrets.token_hex(8)}"
    name, value = marker.split("=")
    argv = bwrap.wrap_argv(
        Confinement(writable=(str(workspace),)),
        ["bash", "-c", "setsid sleep 1000 & (trap '' TERM; sleep 1000) & wait"],
        str(workspace),
        {**ENV, name: value},
    )
    process = subprocess.Popen(argv, env=ENV, stdin=subprocess.DEVNULL)
    try:
        # bash, the detached sleep and the subshell (or its sleep) carry the marker.
        wait_until(
            lambda: marked_processes(marker),
            lambda pids: len(pids) >= 3,
            "three marked processes in the tree",
        )
        # bwrap's pid 1 forks the command before it asks for its parent's death signal
        # (bubblewrap.c: do_init), so the command may be running before pid 1 is bound to
        # bwrap's life; it is once pid 1 waits for its children.
        wait_until(
            lambda: [_wait_channel(pid) for pid in _children(process.pid)],
            lambda channels: channels == ["do_wait"],
            "bwrap's pid 1 waiting for its children",
        )
    finally:
        process.kill()
        process.wait()

    assert survivors(marker) == []


def _children(pid: int) -> list[int]:
    """The children of process ``pid`` (``/proc/PID/task/PID/children``)."""
    try:
        with open(f"/proc/{pid}/task/{pid}/children", encoding="ascii") as f:
            return [int(child) for child in f.read().split()]
    except OSError:
        return []


def _wait_channel(pid: int) -> str:
    """Where in the kernel process ``pid`` sleeps (``/proc/PID/wchan``)."""
    try:
        with open(f"/proc/{pid}/wchan", encoding="ascii") as f:
            return f.read()
    except OSError:
        return ""


def test_command_gets_a_private_tmp_and_no_capabilities(workspace: Path) -> None:
    name = f"bwrap-private-{secrets.token_hex(6)}"
    argv = bwrap.wrap_argv(
        Confinement(writable=(str(workspace),)),
        ["bash", "-c", f"echo x > /tmp/{name}; cat /tmp/{name}; grep CapEff /proc/self/status"],
        str(workspace),
        ENV,
    )

    result = subprocess.run(argv, env=ENV, capture_output=True, text=True, check=False)

    assert result.stdout == "x\nCapEff:\t0000000000000000\n", result.stderr
    assert not os.path.exists(f"/tmp/{name}")


def test_command_sees_only_the_given_environment(workspace: Path) -> None:
    argv = bwrap.wrap_argv(Confinement(), ["env"], str(workspace), {"PATH": ENV["PATH"], "A": "1"})

    result = subprocess.run(
        argv, env={**ENV, "OPENAI_API_KEY": "x"}, capture_output=True, text=True, check=False
    )

    assert sorted(result.stdout.splitlines()) == ["A=1", f"PATH={ENV['PATH']}", f"PWD={workspace}"]


def test_mounts_go_shallowest_first_and_read_only_remounts_last(
    workspace: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Where this interpreter lives under /tmp it is bound back too; that is tested below.
    monkeypatch.setattr(bwrap, "_kept_from_tmp", lambda env: set())
    (workspace / "secret").write_text("s")
    home = str(workspace)
    inner = "/var/tmp"
    argv = bwrap.wrap_argv(
        Confinement(writable=(inner,), read_denied=(home, f"{home}/secret", "/no/such/path")),
        ["true"],
        "/",
        {},
    )

    start = argv.index("/tmp") + 1
    assert argv[start : argv.index("--chdir")] == [
        "--bind", inner, inner,
        "--tmpfs", home,
        "--ro-bind", "/dev/null", f"{home}/secret",
        "--remount-ro", home,
    ]  # fmt: skip


@pytest.mark.parametrize(
    ("confinement", "cwd", "message"),
    [
        (Confinement(network=False), "/", "seccomp_fd"),
        (Confinement(), "relative", "cwd must be absolute"),
    ],
)
def test_wrap_argv_refuses_what_it_cannot_make_safe(
    confinement: Confinement, cwd: str, message: str
) -> None:
    with pytest.raises(ValueError, match=message):
        bwrap.wrap_argv(confinement, ["true"], cwd, ENV)


def test_programs_installed_under_tmp_stay_runnable(tmp_path: Path) -> None:
    # A checkout or virtual environment in /tmp (as CI clones often are) must still run
    # under the private /tmp: its prefix is bound back read-only.
    prefix = tmp_path / "venv"
    (prefix / "bin").mkdir(parents=True)
    (prefix / "lib").mkdir()
    (prefix / "lib" / "data.txt").write_text("from the prefix\n")
    tool = prefix / "bin" / "hello-from-tmp"
    tool.write_text(f"#!/bin/sh\ncat {prefix}/lib/data.txt\n")
    tool.chmod(0o755)
    (tmp_path / "other.txt").write_text("hidden\n")
    env = {"PATH": f"{prefix / 'bin'}:{ENV['PATH']}"}
    argv = bwrap.wrap_argv(
        Confinement(), ["sh", "-c", f"hello-from-tmp; cat {tmp_path}/other.txt"], "/", env
    )
    done = subprocess.run(argv, capture_output=True, text=True, timeout=30, check=False)
    assert done.stdout == "from the prefix\n"
    assert "No such file or directory" in done.stderr
