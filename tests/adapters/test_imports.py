"""The core never imports adapters or their SDKs; a missing SDK names the command that
installs it, whether this package came from a wheel or a clone."""

from __future__ import annotations

import os
import shlex
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
        "import sys, workspace_tools, workspace_tools.cli._main, workspace_tools.cli._demo\n"
        "heavy = ('workspace_tools.adapters', 'mcp', 'openai', 'anthropic', 'pydantic_ai')\n"
        "print(sorted(m for m in sys.modules if m.split('.')[0] in heavy or "
        "m.startswith('workspace_tools.adapters')))"
    )
    assert (done.returncode, done.stdout) == (0, "[]\n"), done.stderr


# pyproject.toml's extras as the installed metadata spells them (specifiers sorted).
@pytest.mark.parametrize(
    ("module", "sdk", "requirement"),
    [
        ("workspace_tools.adapters.mcp", "mcp", "'mcp<2,>=1.30'"),
        ("workspace_tools.adapters.pydantic_ai", "pydantic_ai", "'pydantic-ai-slim>=2.18'"),
    ],
)
def test_missing_sdk_names_the_command_that_installs_it(
    module: str, sdk: str, requirement: str
) -> None:
    done = python(
        f"import sys; sys.modules[{sdk!r}] = None\n"
        f"try:\n    import {module}\n"
        "except ImportError as exc:\n    print(exc)"
    )
    assert done.stdout == (
        f"{sdk} is not installed; install it with: "
        f"{shlex.quote(sys.executable)} -m pip install {requirement}\n"
    )


def test_missing_sdk_of_a_source_tree_that_is_not_installed_names_the_tree() -> None:
    done = python(
        "import sys; sys.modules['mcp'] = None\n"
        "from importlib import metadata\n"
        "def requires(name):\n    raise metadata.PackageNotFoundError(name)\n"
        "metadata.requires = requires\n"
        "try:\n    import workspace_tools.adapters.mcp\n"
        "except ImportError as exc:\n    print(exc)"
    )
    assert done.stdout == (
        "mcp is not installed; install it with: "
        f"{shlex.quote(sys.executable)} -m pip install -e {shlex.quote(f'{REPO}[mcp]')}\n"
    )


def test_cli_without_the_mcp_sdk_says_how_to_install_it_in_one_line() -> None:
    done = python(
        "import sys; sys.modules['mcp'] = None\n"
        "from workspace_tools.cli._main import main\n"
        "sys.exit(main(['schema', '--format', 'mcp']))"
    )
    assert (done.returncode, done.stdout) == (1, "")
    assert done.stderr == (
        "workspace-tools: error: mcp is not installed; install it with: "
        f"{shlex.quote(sys.executable)} -m pip install 'mcp<2,>=1.30'\n"
    )
