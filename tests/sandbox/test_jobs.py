"""The typed messages of the spawn wire: every kind survives the JSON trip as it was."""

from __future__ import annotations

import json

import pytest

from sandbox.layers._confinement import Confinement
from sandbox.spawn._jobs import (
    CommandExited,
    CommandJob,
    Message,
    StartFailed,
    StopTree,
    SupervisorReady,
    TreeDone,
    WantSupervisor,
    decode,
    encode,
)

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
        CommandExited(256),
        TreeDone(None),
        TreeDone(9),
    ],
    ids=lambda message: type(message).__name__,
)
def test_every_message_survives_the_wire(message: Message) -> None:
    assert decode(json.loads(json.dumps(encode(message)))) == message


def test_a_job_travels_as_a_tagged_object_of_primitives() -> None:
    wire = json.loads(json.dumps(encode(CommandJob(argv=("true",), cwd="/", env=None))))
    assert wire == {
        "kind": "job",
        "argv": ["true"],
        "cwd": "/",
        "env": None,
        "rlimits": [],
        "memory_bytes": None,
        "layers": [],
        "confinement": {
            "writable": [],
            "read_denied": [],
            "read_only": [],
            "network": True,
            "max_processes": None,
        },
        "cgroup": None,
        "seccomp_fd": None,
        "report_fd": None,
    }


@pytest.mark.parametrize(
    ("data", "error"),
    [
        ({"kind": "launch", "argv": ["true"]}, "unknown message kind in {'kind': 'launch', "),
        ({"argv": ["true"]}, "unknown message kind in {'argv': ['true']}"),
        ({"kind": "stop", "seconds": 1}, "malformed StopTree: "),
    ],
)
def test_a_message_of_no_known_shape_is_refused(data: dict, error: str) -> None:
    with pytest.raises(ValueError) as raised:
        decode(data)
    assert str(raised.value).startswith(error), str(raised.value)
