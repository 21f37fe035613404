"""The command line with bad input: a damaged or unreadable checkpoint record is a usage
error in one line (exit code 2), never a traceback."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from workspace_tools import ToolSession, Workspace
from workspace_tools.session._checkpoints import Checkpoints


def cli(*argv: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "workspace_tools", *argv],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def record(tmp_path: Path, text: bytes) -> Path:
    """A kept directory whose record is ``text``, ROOT standing for an existing root."""
    (tmp_path / "root").mkdir()
    directory = tmp_path / "kept"
    directory.mkdir()
    root = json.dumps(str(tmp_path / "root")).encode()
    (directory / "checkpoints.json").write_bytes(text.replace(b'"ROOT"', root))
    return directory


DAMAGED = [
    (b'{"version": 1}', "root: Field required"),
    (b'{"version": 1, "root": 5, "steps": [], "seen": {}}', "root: Input should be a valid"),
    (b'{"version": 1, "root": "ROOT", "steps": [{"step": "x"}], "seen": {}}', "steps.0.step"),
    (b'{"version": 1, "root": "ROOT", "steps": 5, "seen": {}}', "steps: Input should be a valid"),
    (
        b'{"version": 1, "root": "ROOT", "steps": [{"step": 1, "changes": {"a": [null, [1]]},'
        b' "undone": []}], "seen": {}}',
        "steps.0.changes.a.1",
    ),
    (b'{"version": 1, "root": "ROOT", "steps": [], "seen": {"a": "x"}}', "seen.a"),
]


@pytest.mark.parametrize(("text", "said"), DAMAGED)
def test_a_damaged_record_is_refused_in_one_line(tmp_path: Path, text: bytes, said: str) -> None:
    directory = record(tmp_path, text)
    with pytest.raises(ValueError) as raised:
        Checkpoints.load(directory)
    message = str(raised.value)
    assert message.startswith(f"the checkpoint record in {directory} is damaged: "), message
    assert said in message, message
    for argv in (("checkpoints", str(directory)), ("restore", str(directory), "1")):
        done = cli(*argv)
        assert (done.returncode, done.stdout) == (2, ""), (done.returncode, done.stderr)
        assert done.stderr.startswith("workspace-tools: error: the checkpoint record in "), done
        assert "Traceback" not in done.stderr and done.stderr.count("\n") == 1, done.stderr


def test_an_unreadable_record_names_the_cause_without_errno(tmp_path: Path) -> None:
    directory = tmp_path / "kept"
    (directory / "checkpoints.json").mkdir(parents=True)
    not_a_directory = tmp_path / "file"
    not_a_directory.write_bytes(b"x")
    for target, cause in ((directory, "Is a directory"), (not_a_directory, "Not a directory")):
        with pytest.raises(ValueError) as raised:
            Checkpoints.load(target)
        assert str(raised.value) == (f"cannot read the checkpoint record in {target}: {cause}"), (
            raised.value
        )
        done = cli("checkpoints", str(target))
        assert done.returncode == 2, done
        assert done.stderr == (
            f"workspace-tools: error: cannot read the checkpoint record in {target}: {cause}\n"
        )


def test_a_record_with_non_utf8_names_round_trips(tmp_path: Path) -> None:
    root = tmp_path / "root"
    root.mkdir()
    store = tmp_path / "store"
    name = b"caf\xe9.txt".decode("utf-8", "surrogateescape")
    workspace = Workspace(root)
    kept = Checkpoints(workspace, directory=store, keep=True)
    with ToolSession(workspace, checkpoints=kept) as session:
        result = session.call_sync("write_file", {"path": name, "content": "x\n"})
        assert result.error_code is None, result.error
        step = session.steps[-1]
        json.dumps(step.model_dump(mode="json"))  # a step record is JSON whatever the names
    loaded = Checkpoints.load(store)
    assert [list(c.changes) for c in loaded.steps] == [[name]]
    restored = loaded.restore(loaded.steps[0].step)
    assert restored.conflicts == [], restored
    assert not (root / name).exists()
