"""A sandboxed call's result rebuilds data in the caller, never code: what the call (or a
process it started) sends back cannot make the caller run a function it names. Each
attack checks the host's own state afterwards (a marker file the named function would
write), and the data a tool or a custom call returns still comes back whole."""

from __future__ import annotations

import dataclasses
import datetime
import decimal
import enum
import os
import pathlib
import pickle
import subprocess
import sys
import uuid
from array import array
from collections import Counter, OrderedDict, namedtuple
from pathlib import Path
from typing import Any

import pydantic
import pytest

from sandbox import SandboxError
from sandbox.spawn import _calls
from sandbox.spawn._results import load_outcome
from tests.sandbox._boxes import NewBox
from workspace_tools import ErrorCode, ToolError, invoke_tool
from workspace_tools.tools import workspace_tools

pytestmark = pytest.mark.anyio


class Colour(enum.Enum):
    RED = "red"


@dataclasses.dataclass
class Point:
    x: int
    y: int


Pair = namedtuple("Pair", "left right")


class Model(pydantic.BaseModel):
    name: str
    sizes: list[int]


def data_of_every_kind() -> dict[str, Any]:
    return {
        "plain": [1, 2.5, 3j, "é", b"\xff", bytearray(b"x"), (1,), {1}, frozenset({2}), None],
        "slices": [slice(1, 2, 3)],
        "time": [datetime.datetime(2026, 12, 4, 21, 0), datetime.timedelta(seconds=3)],
        "path": pathlib.PurePosixPath("/a/b"),
        "numbers": [decimal.Decimal("1.10")],
        "id": uuid.UUID(int=7),
        "collections": [OrderedDict(a=1), Counter("aab"), array("Q", [2**40])],
        "own": [Colour.RED, Point(1, 2), Pair(1, 2), Model(name="m", sizes=[1])],
        "error": ToolError("gone", ErrorCode.NOT_FOUND, details={"path": "x"}),
    }


async def test_data_of_every_kind_comes_back_whole(new_box: NewBox, tmp_path: Path) -> None:
    back = await new_box(writable=[str(tmp_path)]).call(data_of_every_kind)
    assert back == {**data_of_every_kind(), "error": back["error"]}
    assert (back["error"].message, back["error"].code, back["error"].details) == (
        "gone",
        ErrorCode.NOT_FOUND,
        {"path": "x"},
    )


def returns_a_reduce_to(target: Any, args: tuple[Any, ...]) -> Any:
    class Hostile:
        def __reduce__(self) -> tuple[Any, ...]:
            return (target, args)

    return Hostile()


def host_marker(tmp_path: Path) -> Path:
    # Outside what the sandbox may write: only the caller could make it.
    marker = Path(os.environ.get("TMPDIR", "/tmp")) / f"wt-result-{os.getpid()}-{tmp_path.name}"
    marker.unlink(missing_ok=True)
    return marker


@pytest.mark.parametrize(
    ("target", "named"),
    [(os.system, "posix.system"), (subprocess.Popen, "subprocess.Popen")],
)
async def test_a_result_naming_a_function_or_a_class_that_runs_code_is_refused(
    new_box: NewBox, tmp_path: Path, target: Any, named: str
) -> None:
    marker = host_marker(tmp_path)
    command = f"touch {marker}" if target is os.system else ["touch", str(marker)]
    box = new_box(writable=[str(tmp_path)])
    with pytest.raises(SandboxError) as refused:
        await box.call(returns_a_reduce_to, target, (command,))
    assert f"result names {named}, which the sandbox does not rebuild" in str(refused.value)
    assert not marker.exists(), f"{marker} was made by the caller"


def raises_system_exit() -> None:
    sys.exit(3)


async def test_an_exit_raised_in_the_call_does_not_end_the_caller(
    new_box: NewBox, tmp_path: Path
) -> None:
    with pytest.raises(SandboxError) as caught:
        await new_box(writable=[str(tmp_path)]).call(raises_system_exit)
    assert str(caught.value) == (
        "the sandboxed call raised SystemExit(3), which ends a process and is not raised here"
    )


#: A command that writes a result frame naming os.system into every pipe its ancestors
#: hold (the call child's result pipe among them), as a hostile command can reach them
#: through /proc.
FORGE = r"""
import os, pickle, sys
class P:
    def __reduce__(self):
        return (os.system, ("touch " + sys.argv[1],))
data = pickle.dumps(P())
frame = len(data).to_bytes(8, "big") + data
mine = {os.readlink("/proc/self/fd/1"), os.readlink("/proc/self/fd/2")}
pid, written = os.getppid(), 0
for _ in range(6):
    try:
        for fd in os.listdir(f"/proc/{pid}/fd"):
            path = f"/proc/{pid}/fd/{fd}"
            try:
                if os.readlink(path).startswith("pipe:") and os.readlink(path) not in mine:
                    w = os.open(path, os.O_WRONLY | os.O_NONBLOCK)
                    os.write(w, frame)
                    os.close(w)
                    written += 1
            except OSError:
                pass
        pid = int(open(f"/proc/{pid}/stat").read().rpartition(")")[2].split()[1])
    except (OSError, ValueError):
        break
print("frames written:", written)
"""


async def test_a_command_forging_its_calls_result_runs_nothing_in_the_caller(
    new_box: NewBox, tmp_path: Path
) -> None:
    # The workspace is outside the writable directories, so the whole run_command call
    # runs in a call child, whose result pipe the command can reach.
    marker = host_marker(tmp_path)
    workspace = tmp_path / "ws"
    workspace.mkdir()
    (workspace / "forge.py").write_text(FORGE)
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    box = new_box(writable=[str(scratch)])
    run = {t.name: t for t in workspace_tools(workspace)}["run_command"]
    result = await invoke_tool(
        run, {"command": f"{sys.executable} forge.py {marker}; sleep 0.2"}, sandbox=box
    )
    assert not marker.exists(), (f"{marker} was made by the caller", result)


def pickled_class_change(cls: type, name: str, value: int) -> bytes:
    """An outcome pickle whose BUILD sets ``cls.name = value`` on the class object itself
    (a slot state), as a hostile child may write one by hand."""
    text = pickle.SHORT_BINUNICODE
    return b"".join(
        [
            pickle.PROTO + b"\x04",
            text + b"\x02ok",
            pickle.GLOBAL + f"{cls.__module__}\n{cls.__qualname__}\n".encode(),
            pickle.NONE + pickle.EMPTY_DICT,
            text + bytes([len(name)]) + name.encode() + pickle.BININT1 + bytes([value]),
            pickle.SETITEM + pickle.TUPLE2 + pickle.BUILD + pickle.TUPLE2 + pickle.STOP,
        ]
    )


def test_a_result_changing_a_class_is_refused_and_the_class_stays() -> None:
    data = pickled_class_change(Point, "x", 99)
    with pytest.raises(SandboxError) as refused:
        load_outcome(data)
    assert str(refused.value) == (
        "the sandboxed call's result changes the class Point, which the sandbox does not "
        "do in this process"
    )
    assert "x" not in vars(Point)
    # The pickle is what it says: unrestricted, it changes the class.
    try:
        assert pickle.loads(data)[1] is Point and vars(Point)["x"] == 99
    finally:
        del Point.x


@pytest.mark.parametrize(
    ("module", "name"),
    [("builtins", "range"), ("builtins", "list"), ("fractions", "Fraction")],
)
def test_a_result_cannot_make_the_caller_compute_or_allocate(module: str, name: str) -> None:
    # deque(range(10**12)) or Fraction("1e30000000") would hold the caller for minutes.
    data = pickle.PROTO + b"\x04" + pickle.GLOBAL + f"{module}\n{name}\n".encode() + pickle.STOP
    with pytest.raises(SandboxError) as refused:
        load_outcome(data)
    assert f"result names {module}.{name}, which the sandbox does not rebuild" in str(refused.value)


def returns_bytes(size: int) -> bytes:
    return b"x" * size


async def test_a_result_over_its_size_is_refused_and_the_next_call_runs(
    new_box: NewBox, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The caller holds a result whole, whatever the call's memory limit: a child that
    # streams a length of 2**62 would otherwise fill the caller's memory.
    monkeypatch.setattr(_calls, "RESULT_BYTES", 4096)
    box = new_box(writable=[str(tmp_path)])
    with pytest.raises(SandboxError) as refused:
        await box.call(returns_bytes, 8192)
    size = len(pickle.dumps(("ok", b"x" * 8192), protocol=pickle.HIGHEST_PROTOCOL))
    assert str(refused.value) == (
        f"the sandboxed call's result is {size:,} bytes, over the 4,096 bytes a result may have; "
        "it was stopped"
    )
    assert await box.call(returns_bytes, 10) == b"x" * 10
