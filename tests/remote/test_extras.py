"""The remote adapters name the extra that installs what they miss."""

from __future__ import annotations

import os
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize(
    ("module", "sdk", "requirement"),
    [
        ("workspace_tools.adapters.ray", "ray", "'ray<3,>=2.40'"),
        ("workspace_tools.adapters.remote", "mcp", "'mcp<2,>=1.30'"),
        ("workspace_tools.adapters.mcp_http", "mcp", "'mcp<2,>=1.30'"),
    ],
)
def test_a_missing_sdk_names_the_command_that_installs_it(
    module: str, sdk: str, requirement: str
) -> None:
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    code = (
        f"import sys; sys.modules[{sdk!r}] = None\n"
        f"try:\n    import {module}\n"
        "except ImportError as exc:\n    print(exc)"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=60
    )
    assert done.stdout == (
        f"{sdk} is not installed; install it with: "
        f"{shlex.quote(sys.executable)} -m pip install {requirement}\n"
    ), done.stderr
