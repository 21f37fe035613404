"""The typed messages of the spawn wire: every kind survives the trip through a socket as
it was, and the receiving end refuses what is not a message."""

from __future__ import annotations

import marshal
import os
import socket
from collections.abc import Iterator, Mapping

import pytest

from sandbox.layers._confinement import Confinement
from sandbox.spawn._jobs import (
    CommandExited,
    CommandJob,
    Message,
    StartFailed,
    StillRunning,
    StopTree,
    SupervisorReady,
    TreeDone,
    WantSupervisor,
    decode,
    encode,
)
from sandbox.spawn._wire import RECEIVED_CLOEXEC, Channel

JOB = CommandJob(
    argv=("bwrap", "--", "bash", "-c", "echo 'é'"),
    cwd="/work/project",
    env={"PATH": "/usr/bin", "LC_ALL": "C.UTF-8"},
    rlimits=(("RLIMIT_CPU", 7), ("RLIMIT_NOFILE", 50)),
    memory_bytes=256 * 1024**2,
    layers=("mount-namespace", "landlock", "seccomp"),
    confinement=Confinement(
        writable=("/work/project", "/tmp/sandbox-tmp-x"),
        read_denied=("/root/.ssh",),
        read_only=("/work/project/.git",),
        network=False,
        max_processes=64,
    ),
    cgroup="/sys/fs/cgroup/sandbox/job-1",
    seccomp_fd=3,
    quiet_seconds=0.02,
)


@pytest.mark.parametrize(
    "message",
    [
        JOB,
        CommandJob(argv=("true",), cwd="/", env=None),
        WantSupervisor(),
        SupervisorReady(),
        StopTree(1.5),
        StartFailed("cannot start 'nope': [Errno 2] No such file or directory"),
        StillRunning(),
        CommandExited(256),
        TreeDone(None),
        TreeDone(9),
    ],
    ids=lambda message: type(message).__name__,
)
def test_every_message_survives_the_wire(message: Message) -> None:
    ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
    sender, receiver = Channel(ours), Channel(theirs)
    try:
        sender.send(message)
        sender.send(message)  # two in one read: the length prefix keeps them apart
        assert receiver.receive() == message
        assert receiver.receive() == message
    finally:
        sender.close()
        receiver.close()


def test_a_job_travels_as_its_kind_and_values_in_field_order() -> None:
    wire = encode(CommandJob(argv=("true",), cwd="/", env=None))
    # kind, argv, cwd, env, rlimits, memory_bytes, layers, confinement (writable,
    # read_denied, read_only, network, max_processes), cgroup, seccomp_fd, report_fd,
    # quiet_seconds, set_aside
    assert wire == (
        "job",
        ("true",),
        "/",
        None,
        (),
        None,
        (),
        ((), (), (), True, None),
        None,
        None,
        None,
        None,
        (),
    )
    assert marshal.loads(marshal.dumps(wire)) == wire


def test_a_job_environment_that_is_a_mapping_travels_as_a_dict() -> None:
    class Env(Mapping[str, str]):
        def __init__(self, data: dict[str, str]) -> None:
            self._data = data

        def __getitem__(self, key: str) -> str:
            return self._data[key]

        def __iter__(self) -> Iterator[str]:
            return iter(self._data)

        def __len__(self) -> int:
            return len(self._data)

    job = CommandJob(argv=("true",), cwd="/", env=Env({"PATH": "/usr/bin"}))
    assert decode(marshal.loads(marshal.dumps(encode(job)))).env == {"PATH": "/usr/bin"}


@pytest.mark.parametrize(
    ("data", "error"),
    [
        (("launch", ("true",)), "unknown message kind in ('launch', ('true',))"),
        ((("true",),), "unknown message kind in (('true',),)"),
        ((), "not an encoded message: ()"),
        ({"kind": "stop", "grace": 1}, "not an encoded message: {'kind': 'stop', 'grace': 1}"),
        (("stop",), "malformed StopTree: 0 values for 1 fields"),
        (("stop", 1.0, 2.0), "malformed StopTree: 2 values for 1 fields"),
        (
            (
                "job",
                *encode(CommandJob(("true",), "/", None))[1:7],
                (1, 2, 3, 4, 5, 6),
                None,
                None,
                None,
            ),
            "malformed CommandJob: ",
        ),
    ],
)
def test_a_message_of_no_known_shape_is_refused(data: object, error: str) -> None:
    with pytest.raises(ValueError) as raised:
        decode(data)  # type: ignore[arg-type]
    assert str(raised.value).startswith(error), str(raised.value)


@pytest.mark.parametrize("payload", [b"\xff\x00", marshal.dumps(("stop",))[:-1], b""])
def test_bytes_that_are_no_message_are_refused_by_the_channel(payload: bytes) -> None:
    ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
    receiver = Channel(theirs)
    try:
        ours.sendall(len(payload).to_bytes(4, "big") + payload)
        with pytest.raises(ValueError):
            receiver.receive()
    finally:
        ours.close()
        receiver.close()


def test_a_read_that_must_not_wait_does_not_block_a_blocking_socket() -> None:
    ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
    receiver = Channel(theirs)
    try:
        assert theirs.getblocking() is True
        with pytest.raises(BlockingIOError):
            receiver.fill(wait=False)
        Channel(ours).send(StopTree(0.5))
        assert receiver.fill(wait=False) is True
        assert receiver.poll() == StopTree(0.5)
    finally:
        ours.close()
        receiver.close()


def test_descriptors_arrive_with_their_message() -> None:
    ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
    sender, receiver = Channel(ours), Channel(theirs)
    read_end, write_end = os.pipe()
    try:
        sender.send(SupervisorReady(), [write_end])
        assert receiver.receive() == SupervisorReady()
        (received,) = receiver.take_fds(1)
        try:
            # Close-on-exec where the kernel can set it on receipt, as Python opens all.
            assert os.get_inheritable(received) is not RECEIVED_CLOEXEC
            os.write(received, b"through")
            assert os.read(read_end, 16) == b"through"
        finally:
            os.close(received)
    finally:
        for fd in (read_end, write_end):
            os.close(fd)
        sender.close()
        receiver.close()
