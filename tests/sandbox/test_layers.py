"""Each isolation layer keeps its promise on the host, checked on the host.

Every case also runs once with no layer ("plain") to prove the setup would have let the
action through, and every command prints "ran" first so a sandbox that fails to start
cannot pass as a denial.
"""

from __future__ import annotations

import os
import secrets
import shutil
import socket
import subprocess
import sys
import tempfile
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from sandbox.layers import bwrap, landlock, seccomp
from sandbox.layers._confinement import Confinement
from sandbox.layers._syscall import host_arch

ENV = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "LANG": "C.UTF-8"}
Runner = Callable[[Confinement, list[str], str], "subprocess.CompletedProcess[str]"]


def _run(argv: list[str], cwd: str, **kwargs: object) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        argv,
        cwd=cwd,
        env=ENV,
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
        **kwargs,  # type: ignore[arg-type]
    )


def run_plain(
    confinement: Confinement, argv: list[str], cwd: str
) -> subprocess.CompletedProcess[str]:
    return _run(argv, cwd)


def run_bwrap(
    confinement: Confinement, argv: list[str], cwd: str
) -> subprocess.CompletedProcess[str]:
    read_end, write_end = os.pipe()
    os.write(write_end, seccomp.network_filter())
    os.close(write_end)
    try:
        wrapped = bwrap.wrap_argv(confinement, argv, cwd, ENV, seccomp_fd=read_end)
        return _run(wrapped, cwd, pass_fds=(read_end,))
    finally:
        os.close(read_end)


def run_landlock(
    confinement: Confinement, argv: list[str], cwd: str
) -> subprocess.CompletedProcess[str]:
    return _run(argv, cwd, preexec_fn=lambda: landlock.apply(confinement))


def run_seccomp(
    confinement: Confinement, argv: list[str], cwd: str
) -> subprocess.CompletedProcess[str]:
    return _run(argv, cwd, preexec_fn=seccomp.install_filter)


def run_landlock_seccomp(
    confinement: Confinement, argv: list[str], cwd: str
) -> subprocess.CompletedProcess[str]:
    def confine() -> None:
        landlock.apply(confinement)
        seccomp.install_filter()

    return _run(argv, cwd, preexec_fn=confine)


_BWRAP_MISSING = bwrap.available()
_LANDLOCK_ABI = landlock.abi_version()
needs_bwrap = pytest.mark.skipif(_BWRAP_MISSING is not None, reason=str(_BWRAP_MISSING))
needs_seccomp = pytest.mark.skipif(host_arch() is None, reason="no seccomp syscall table here")


def needs_landlock(abi: int) -> pytest.MarkDecorator:
    return pytest.mark.skipif(
        abi > _LANDLOCK_ABI, reason=f"needs Landlock ABI >= {abi}, kernel has {_LANDLOCK_ABI}"
    )


PLAIN = pytest.param(run_plain, True, id="plain")
BWRAP = pytest.param(run_bwrap, False, id="bubblewrap", marks=needs_bwrap)
LANDLOCK = pytest.param(run_landlock, False, id="landlock", marks=needs_landlock(1))
SECCOMP = pytest.param(run_seccomp, False, id="seccomp", marks=needs_seccomp)
LANDLOCK_SECCOMP = pytest.param(
    run_landlock_seccomp, False, id="landlock+seccomp", marks=[needs_landlock(1), needs_seccomp]
)


@dataclass(frozen=True)
class Host:
    """Directories on the host, outside /tmp so that bubblewrap's private /tmp cannot hide
    them and turn a denial into a trivial "no such file"."""

    base: Path
    workspace: Path
    outside: Path
    secret_file: Path
    secret_dir: Path
    workspace_secret: Path
    token: str


@pytest.fixture
def host() -> Iterator[Host]:
    base = Path(tempfile.mkdtemp(prefix="lay", dir="/var/tmp"))
    token = secrets.token_hex(8)
    workspace = base / "ws"
    (workspace / "src").mkdir(parents=True)
    (workspace / "src" / "readme.txt").write_text("visible-" + token)
    (base / "outside").mkdir()
    (base / "keys").mkdir()
    (base / "keys" / "id_rsa").write_text("dir-secret-" + token)
    (base / "secret.txt").write_text("file-secret-" + token)
    (workspace / ".env").write_text("workspace-secret-" + token)
    yield Host(
        base=base,
        workspace=workspace,
        outside=base / "outside",
        secret_file=base / "secret.txt",
        secret_dir=base / "keys",
        workspace_secret=workspace / ".env",
        token=token,
    )
    shutil.rmtree(base)


def python(code: str) -> list[str]:
    return [sys.executable, "-c", "print('ran', flush=True)\n" + code]


@pytest.mark.parametrize(("runner", "allowed"), [PLAIN, BWRAP, LANDLOCK])
def test_write_outside_writable_leaves_host_untouched(
    host: Host, runner: Runner, allowed: bool
) -> None:
    code = """
import sys
for path in sys.argv[1:]:
    try:
        open(path, "w").write("x")
    except OSError as exc:
        print(path, exc)
"""
    inside = host.workspace / "src" / "made.txt"
    outside = host.outside / "made.txt"
    confinement = Confinement(writable=(str(host.workspace),))

    result = runner(confinement, [*python(code), str(inside), str(outside)], str(host.workspace))

    assert result.stdout.startswith("ran\n"), result.stderr
    assert inside.read_text() == "x"
    assert outside.exists() is allowed


@pytest.mark.parametrize(("runner", "allowed"), [PLAIN, BWRAP, LANDLOCK])
def test_read_of_denied_path_shows_no_content(host: Host, runner: Runner, allowed: bool) -> None:
    code = """
import os, sys
for path in sys.argv[1:]:
    files = [path] if not os.path.isdir(path) else [
        os.path.join(d, f) for d, _, names in os.walk(path) for f in names]
    for name in files:
        try:
            print(open(name).read())
        except OSError as exc:
            print(name, exc)
"""
    denied = (host.secret_file, host.secret_dir, host.workspace_secret)
    confinement = Confinement(writable=(str(host.workspace),), read_denied=tuple(map(str, denied)))

    result = runner(
        confinement,
        [*python(code), str(host.workspace / "src" / "readme.txt"), *map(str, denied)],
        str(host.workspace),
    )

    output = result.stdout + result.stderr
    assert result.stdout.startswith("ran\n"), result.stderr
    assert f"visible-{host.token}" in output
    for secret in ("file-secret-", "dir-secret-", "workspace-secret-"):
        assert (secret + host.token in output) is allowed


@pytest.mark.parametrize(("runner", "allowed"), [PLAIN, BWRAP, LANDLOCK])
def test_most_specific_entry_decides_nested_paths(
    host: Host, runner: Runner, allowed: bool
) -> None:
    # A workspace inside a denied directory stays writable and readable.
    code = """
import sys
open(sys.argv[1], "w").write("new")
print(open(sys.argv[1]).read(), open(sys.argv[2]).read())
try:
    print(open(sys.argv[3]).read())
except OSError as exc:
    print(exc)
"""
    confinement = Confinement(writable=(str(host.workspace),), read_denied=(str(host.base),))
    made = host.workspace / "src" / "made.txt"

    result = runner(
        confinement,
        [
            *python(code),
            str(made),
            str(host.workspace / "src" / "readme.txt"),
            str(host.secret_file),
        ],
        str(host.workspace),
    )

    assert result.stdout.startswith(f"ran\nnew visible-{host.token}\n"), result.stderr
    assert made.read_text() == "new"
    assert (f"file-secret-{host.token}" in result.stdout) is allowed


@pytest.fixture
def tcp_listener() -> Iterator[socket.socket]:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen(8)
        listener.setblocking(False)
        yield listener


def _accepted(listener: socket.socket) -> bool:
    # The handshake on loopback completes inside connect(), so a connection the child
    # made is already queued here when the child has exited.
    try:
        connection, _ = listener.accept()
    except BlockingIOError:
        return False
    connection.close()
    return True


CONNECT = """
import socket, sys
family, target = getattr(socket, sys.argv[1]), sys.argv[2]
if family == socket.AF_INET:
    address = ("127.0.0.1", int(target))
else:
    # "@name" names an abstract socket: argv cannot carry its leading NUL.
    address = "\\0" + target[1:] if target.startswith("@") else target
try:
    socket.socket(family, socket.SOCK_STREAM).connect(address)
    print("connected")
except OSError as exc:
    print(exc)
"""


@pytest.mark.parametrize(
    ("runner", "allowed"),
    [
        PLAIN,
        BWRAP,
        pytest.param(run_landlock, False, id="landlock", marks=needs_landlock(4)),
        SECCOMP,
        LANDLOCK_SECCOMP,
    ],
)
def test_tcp_connect_to_host_listener_is_refused(
    host: Host, tcp_listener: socket.socket, runner: Runner, allowed: bool
) -> None:
    port = str(tcp_listener.getsockname()[1])

    result = runner(
        Confinement(network=False), [*python(CONNECT), "AF_INET", port], str(host.workspace)
    )

    assert result.stdout.startswith("ran\n"), result.stderr
    assert ("connected" in result.stdout) is allowed
    assert _accepted(tcp_listener) is allowed


@pytest.mark.parametrize(
    ("runner", "allowed"),
    [
        PLAIN,
        BWRAP,
        SECCOMP,
        LANDLOCK_SECCOMP,
        # Documented gap: Landlock has no UDP rules.
        pytest.param(run_landlock, True, id="landlock-alone-lets-udp-out", marks=needs_landlock(4)),
    ],
)
def test_udp_send_to_host_does_not_arrive(host: Host, runner: Runner, allowed: bool) -> None:
    code = """
import socket, sys
try:
    socket.socket(socket.AF_INET, socket.SOCK_DGRAM).sendto(
        sys.argv[2].encode(), ("127.0.0.1", int(sys.argv[1])))
    print("sent")
except OSError as exc:
    print(exc)
"""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as receiver:
        receiver.bind(("127.0.0.1", 0))
        receiver.setblocking(False)
        port = str(receiver.getsockname()[1])

        result = runner(
            Confinement(network=False), [*python(code), port, host.token], str(host.workspace)
        )

        assert result.stdout.startswith("ran\n"), result.stderr
        try:
            received = receiver.recv(100) == host.token.encode()
        except BlockingIOError:
            received = False
    assert received is allowed


@pytest.mark.parametrize(
    ("runner", "allowed"),
    [
        PLAIN,
        BWRAP,
        SECCOMP,
        LANDLOCK_SECCOMP,
        # Documented gap: Landlock does not mediate connect() to a socket file.
        pytest.param(
            run_landlock, True, id="landlock-alone-reaches-socket-files", marks=needs_landlock(1)
        ),
    ],
)
def test_host_unix_socket_file_is_unreachable(host: Host, runner: Runner, allowed: bool) -> None:
    # Inside the writable workspace, so that bubblewrap shows the socket file.
    path = str(host.workspace / "s.sock")
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as listener:
        listener.bind(path)
        listener.listen(8)
        listener.setblocking(False)
        confinement = Confinement(writable=(str(host.workspace),), network=False)

        result = runner(confinement, [*python(CONNECT), "AF_UNIX", path], str(host.workspace))

        assert result.stdout.startswith("ran\n"), result.stderr
        assert ("connected" in result.stdout) is allowed
        assert _accepted(listener) is allowed


@pytest.mark.parametrize(
    ("runner", "allowed"),
    [
        PLAIN,
        BWRAP,
        SECCOMP,
        pytest.param(run_landlock, False, id="landlock", marks=needs_landlock(6)),
    ],
)
def test_host_abstract_unix_socket_is_unreachable(
    host: Host, runner: Runner, allowed: bool
) -> None:
    name = f"\0sandbox-layers-{host.token}"
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as listener:
        listener.bind(name)
        listener.listen(8)
        listener.setblocking(False)

        result = runner(
            Confinement(network=False),
            [*python(CONNECT), "AF_UNIX", "@" + name[1:]],
            str(host.workspace),
        )

        assert result.stdout.startswith("ran\n"), result.stderr
        assert ("connected" in result.stdout) is allowed
        assert _accepted(listener) is allowed
