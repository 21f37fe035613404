"""A real ``workspace-tools serve`` process on 127.0.0.1 for the remote tests."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from tests._waiting import wait_until

#: Seconds a server may take to start on a loaded two-core host.
START_DEADLINE = 60.0


@dataclass
class Served:
    """A running server: its MCP ``url``, ``token``, ``root`` and process."""

    url: str
    token: str
    root: Path
    process: subprocess.Popen[str]

    @property
    def base(self) -> str:
        return self.url.rsplit("/", 1)[0]


#: What the SDK's session manager logs (at INFO) for each MCP session it opens.
SESSION_OPENED = "Created new transport with session ID"

# Runs the command line with the SDK's session manager logging at INFO to the file argv[1].
_LOGGING_MAIN = (
    "import logging, sys\n"
    "log = logging.getLogger('mcp.server.streamable_http_manager')\n"
    "log.addHandler(logging.FileHandler(sys.argv.pop(1)))\n"
    "log.setLevel(logging.INFO)\n"
    "from workspace_tools.cli import main\n"
    "sys.exit(main(sys.argv[1:]))\n"
)


@contextmanager
def serve(
    root: Path,
    *flags: str,
    env: dict[str, str] | None = None,
    token_line: bool = True,
    address: str = "127.0.0.1:0",
    session_log: Path | None = None,
) -> Iterator[Served]:
    """Start ``workspace-tools serve --root ROOT --http ADDRESS FLAGS`` and read the URL
    (and the generated token) it prints; stop it (SIGTERM, then SIGKILL) at the end. With
    ``session_log``, the server writes a :data:`SESSION_OPENED` line there per MCP session."""
    start = [sys.executable, "-m", "workspace_tools"]
    if session_log is not None:
        start = [sys.executable, "-c", _LOGGING_MAIN, str(session_log)]
    command: Sequence[str] = [*start, "serve", "--root", str(root), "--http", address, *flags]
    environment = {**os.environ, **(env or {})}
    if env is None:
        environment.pop("WORKSPACE_TOOLS_TOKEN", None)
    process = subprocess.Popen(
        command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=environment
    )
    try:
        assert process.stdout is not None
        first = process.stdout.readline()
        assert first.startswith("serving http://127.0.0.1:"), (first, _stderr(process))
        url = first.split()[1]
        token = (env or {}).get("WORKSPACE_TOOLS_TOKEN", "")
        if token_line:
            second = process.stdout.readline()
            assert second.startswith("token "), second
            token = second.split()[1]
        yield Served(url=url, token=token, root=root, process=process)
    finally:
        stop(process)


def stop(process: subprocess.Popen[str]) -> None:
    """SIGTERM, wait for the exit, SIGKILL if it does not come."""
    if process.poll() is None:
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(timeout=START_DEADLINE)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
    for stream in (process.stdout, process.stderr):
        if stream is not None:
            stream.close()


def _stderr(process: subprocess.Popen[str]) -> str:
    if process.poll() is None or process.stderr is None:
        return ""
    return process.stderr.read()


def processes_with_argument(argument: str) -> list[int]:
    """Pids of live processes with ``argument`` among their argv (``/proc/PID/cmdline``)."""
    needle = argument.encode()
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/cmdline", "rb") as f:
                if needle in f.read().split(b"\0"):
                    found.append(int(entry))
        except OSError:
            continue
    return sorted(found)


def wait_gone(argument: str) -> None:
    """Wait until no process has ``argument`` in its argv."""
    wait_until(lambda: processes_with_argument(argument), lambda pids: pids == [], argument)


def sessions_opened(log: Path) -> int:
    """How many MCP sessions the server writing ``log`` opened."""
    return log.read_text().count(SESSION_OPENED) if log.exists() else 0
