"""A command's result says which processes it left running were stopped when it ended.

Without bubblewrap the supervisor counts them before it stops them; under bubblewrap the
PID namespace's end kills them, and a shell inside reports them. Either way the result
names the same processes, and none of them survives.
"""

from __future__ import annotations

import secrets
from pathlib import Path

import pytest

from sandbox import ProcessResult, Sandbox
from sandbox.layers import BUBBLEWRAP, bwrap
from tests._processes import survivors
from tests.sandbox._boxes import NewBox, force_landlock

pytestmark = pytest.mark.anyio

MODES = ["plain", "bubblewrap", "landlock"]


def _until_running(program: str) -> str:
    """Shell that waits until the background job ``$!`` runs ``program`` rather than the
    shell's fork of itself, so that the names reported do not depend on timing."""
    return f'until [ "$(cat /proc/$!/comm 2>/dev/null)" = {program} ]; do :; done'


def _box(new_box: NewBox, mode: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Sandbox:
    allow = ("PATH", "WT_TEST_MARKER")
    if mode == "plain":
        return new_box(layers=False, env_allowlist=allow)
    if mode == "landlock":
        force_landlock(monkeypatch)
    elif bwrap.available() is not None:
        pytest.skip(f"bubblewrap does not work here: {bwrap.available()}")
    box = new_box(writable=[str(tmp_path)], env_allowlist=allow)
    assert (BUBBLEWRAP in box.capabilities.values()) == (mode == "bubblewrap"), box.capabilities
    return box


async def _run(box: Sandbox, command: str, timeout: float = 60) -> ProcessResult:
    return await box.run(["/bin/sh", "-c", command], timeout=timeout)


@pytest.mark.parametrize("mode", MODES)
async def test_processes_left_running_are_counted_named_and_stopped(
    new_box: NewBox, mode: str, tmp_path: Path, marker: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    box = _box(new_box, mode, tmp_path, monkeypatch)
    command = (
        f"sleep 1000 & {_until_running('sleep')}; "
        f"sleep 1000 >/dev/null & {_until_running('sleep')}; "
        f"tail -f /dev/null & {_until_running('tail')}; "
        # The marker shows that the survivor check below looks for these processes.
        'echo "WT_TEST_MARKER=$WT_TEST_MARKER"; echo err >&2; exit 3'
    )

    result = await _run(box, command)

    seen = (result.exit_code, result.stdout.complete, result.stderr.complete)
    assert seen == (3, f"{marker}\n".encode(), b"err\n")
    assert result.stopped_processes == 3, result
    assert sorted(result.stopped_names) == ["sleep", "tail"], result
    assert survivors(marker) == []


@pytest.mark.parametrize("mode", MODES)
async def test_nothing_left_running_reports_nothing(
    new_box: NewBox, mode: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    box = _box(new_box, mode, tmp_path, monkeypatch)

    result = await _run(box, "sleep 0 & wait; echo done")

    seen = (result.exit_code, result.stdout.complete, result.stderr.complete)
    assert seen == (0, b"done\n", b"")
    assert (result.stopped_processes, result.stopped_names) == (0, ())


@pytest.mark.parametrize("mode", MODES)
async def test_a_timeout_reports_nothing_stopped(
    new_box: NewBox, mode: str, tmp_path: Path, marker: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    box = _box(new_box, mode, tmp_path, monkeypatch)

    result = await _run(box, "sleep 1000 & sleep 1000", timeout=1)

    assert (result.timed_out, result.exit_code) == (True, None), result
    assert (result.stopped_processes, result.stopped_names) == (0, ())
    assert survivors(marker) == []


@pytest.mark.parametrize("mode", MODES)
async def test_a_command_killed_by_a_signal_keeps_its_exit_code(
    new_box: NewBox, mode: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    box = _box(new_box, mode, tmp_path, monkeypatch)

    result = await _run(box, "kill -KILL $$")

    # bubblewrap reports a signal as 128 + N, without its name.
    signal = None if mode == "bubblewrap" else "SIGKILL"
    seen = (result.exit_code, result.signal, result.stderr.complete, result.stopped_processes)
    assert seen == (137, signal, b"", 0)


@pytest.mark.parametrize("writable", ["none", "root"])
async def test_without_write_confinement_the_namespace_keeps_its_own_proc_and_tmp(
    new_box: NewBox, writable: str, tmp_path: Path
) -> None:
    # With nothing confined, the whole tree is bound writable; the PID namespace's /proc,
    # the minimal /dev and the private /tmp still cover the host's: a command that
    # left nothing running reports nothing (not every process of the host) and /tmp stays
    # private.
    if bwrap.available() is not None:
        pytest.skip(f"bubblewrap does not work here: {bwrap.available()}")
    box = new_box(writable=[] if writable == "none" else ["/"])
    assert BUBBLEWRAP in box.capabilities.values(), box.capabilities
    name = f"wt-private-{secrets.token_hex(8)}"

    result = await _run(box, f"cat /proc/1/comm; touch /tmp/{name}")

    seen = (result.exit_code, result.stdout.complete, result.stderr.complete)
    assert seen == (0, b"bwrap\n", b"")
    assert (result.stopped_processes, result.stopped_names) == (0, ())
    assert not (Path("/tmp") / name).exists()
