"""Running test code as another user: root's tests check what an unprivileged caller gets."""

from __future__ import annotations

import json
import os
import pwd
from collections.abc import Callable
from typing import Any


def as_nobody(work: Callable[[], Any]) -> Any:
    """Run ``work`` in a forked child as ``nobody``:``nogroup`` and return its JSON value
    (``{"child_error": ...}`` when it raised)."""
    nobody = pwd.getpwnam("nobody")
    read_fd, write_fd = os.pipe()
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the child
        try:
            os.close(read_fd)
            os.setgroups([nobody.pw_gid])
            os.setgid(nobody.pw_gid)
            os.setuid(nobody.pw_uid)
            payload = json.dumps(work())
        except BaseException as exc:
            payload = json.dumps({"child_error": repr(exc)})
        with os.fdopen(write_fd, "w") as out:
            out.write(payload)
        os._exit(0)
    os.close(write_fd)
    with os.fdopen(read_fd) as inp:
        data = inp.read()
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0, data
    return json.loads(data)
