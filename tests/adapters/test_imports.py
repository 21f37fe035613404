"""The core never imports adapters or their SDKs; a missing SDK names the extra to install."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


def python(code: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    return subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=60
    )


def test_core_imports_no_adapter_and_no_sdk() -> None:
    done = python(
        "import sys, workspace_tools, workspace_tools.cli, workspace_tools._demo\n"
        "heavy = ('workspace_tools.adapters', 'mcp', 'openai', 'anthropic', 'pydantic_ai')\n"
        "print(sorted(m for m in sys.modules if m.split('.')[0] in heavy or "
        "m.startswith('workspace_tools.adapters')))"
    )
    assert (done.returncode, done.stdout) == (0, "[]\n"), done.stderr


@pytest.mark.parametrize(
    ("module", "sdk", "extra"),
    [
        ("workspace_tools.adapters.mcp", "mcp", "mcp"),
        ("workspace_tools.adapters.pydantic_ai", "pydantic_ai", "pydantic-ai"),
    ],
)
def test_missing_sdk_names_the_extra(module: str, sdk: str, extra: str) -> None:
    done = python(
        f"import sys; sys.modules[{sdk!r}] = None\n"
        f"try:\n    import {module}\n"
        "except ImportError as exc:\n    print(exc)"
    )
    assert done.stdout == (
        f'{sdk} is not installed; install it with pip install "agent-workspace-tools[{extra}]"\n'
    )


def test_cli_without_the_mcp_sdk_says_which_extra_in_one_line() -> None:
    done = python(
        "import sys; sys.modules['mcp'] = None\n"
        "from workspace_tools.cli import main\n"
        "sys.exit(main(['schema', '--format', 'mcp']))"
    )
    assert (done.returncode, done.stdout) == (1, "")
    assert done.stderr == (
        "workspace-tools: error: mcp is not installed; install it with "
        'pip install "agent-workspace-tools[mcp]"\n'
    )
