"""A module that is slow to import in any process but the test's: what a call's worker
imports before any call."""

from __future__ import annotations

import importlib
import os
import secrets
from pathlib import Path
from types import ModuleType

import pytest


def slow_import_module(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> ModuleType:
    """A new module (a unique name, in ``tmp_path``, put on ``sys.path``) whose import
    spends 1.5 s of CPU in any process but this one, imported here at once; its ``pid()``
    returns the pid of the process it runs in."""
    name = f"slow_import_{secrets.token_hex(4)}"
    (tmp_path / f"{name}.py").write_text(
        "import os, time\n"
        f"if os.getpid() != {os.getpid()}:\n"
        "    end = time.process_time() + 1.5\n"
        "    while time.process_time() < end:\n"
        "        pass\n"
        "def pid():\n"
        "    return os.getpid()\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    return importlib.import_module(name)
