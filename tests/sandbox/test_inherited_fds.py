"""Descriptors the host process left inheritable (a pipe of the application, what its own
parent passed down) reach no command and no shell: only stdin, stdout and stderr do."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

#: Leaves an inheritable pipe open (as a host application might), then lists the
#: descriptors of run_command's command, a sandboxed one's, and the persistent shell's.
_HOST = """
import json, os, sys
from pathlib import Path
from sandbox import Sandbox
from workspace_tools import ShellSession, invoke_tool_sync, shell_tools
from workspace_tools.tools import workspace_tools

root = Path(sys.argv[1])
read_end, write_end = os.pipe()
os.set_inheritable(read_end, True)
os.set_inheritable(write_end, True)
# A child of the shell, as every command is; its listing's own descriptor is the lowest
# free one: 3 when nothing else was inherited.
listing = "python3 -c 'import os; print(*sorted(os.listdir(\\"/proc/self/fd\\"), key=int))'"
seen = {}
for name, box in (("plain", None), ("sandboxed", Sandbox(best_effort=True))):
    tools = {t.name: t for t in workspace_tools(root, sandbox=box)}
    result = invoke_tool_sync(tools["run_command"], {"command": listing, "timeout": 60})
    seen[name] = result.content["stdout"].split()
    if box is not None:
        box.close()
with ShellSession(root) as session:
    shell = {t.name: t for t in shell_tools(session)}["shell"]
    seen["shell"] = invoke_tool_sync(shell, {"command": listing}).content["stdout"].split()
print(json.dumps(seen))
"""


def test_no_command_inherits_the_hosts_descriptors(tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, "-c", _HOST, str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=120,
        close_fds=False,  # the host itself may hold inheritable descriptors of its own
    )
    assert done.returncode == 0, done.stderr
    seen = json.loads(done.stdout)
    expected = ["0", "1", "2", "3"]
    assert seen == {"plain": expected, "sandboxed": expected, "shell": expected}
