"""A general subprocess sandbox: runs a command or a Python callable in a child process
under limits, and says which protections it really enforced."""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from sandbox._defaults import CREDENTIAL_PATHS, HOST_EXEC_PATHS
    from sandbox._env import DEFAULT_ENV_ALLOWLIST
    from sandbox._errors import SandboxError, SandboxUnavailable, UnpicklableCall
    from sandbox._limits import SandboxLimits
    from sandbox._sandbox import Sandbox
    from sandbox.layers._confinement import Confinement
    from sandbox.spawn._capture import CapturedOutput
    from sandbox.spawn._process import ProcessResult

# Each public name and the module that defines it, imported on first use (PEP 562): the
# spawn server and its workers import ``sandbox.spawn`` modules alone, so they start
# without the caller's side (the Sandbox class, anyio, the layers' probes).
_HOMES = {
    "CREDENTIAL_PATHS": "sandbox._defaults",
    "DEFAULT_ENV_ALLOWLIST": "sandbox._env",
    "HOST_EXEC_PATHS": "sandbox._defaults",
    "CapturedOutput": "sandbox.spawn._capture",
    "Confinement": "sandbox.layers._confinement",
    "ProcessResult": "sandbox.spawn._process",
    "Sandbox": "sandbox._sandbox",
    "SandboxError": "sandbox._errors",
    "SandboxLimits": "sandbox._limits",
    "SandboxUnavailable": "sandbox._errors",
    "UnpicklableCall": "sandbox._errors",
}

__all__ = [
    "CREDENTIAL_PATHS",
    "DEFAULT_ENV_ALLOWLIST",
    "HOST_EXEC_PATHS",
    "CapturedOutput",
    "Confinement",
    "ProcessResult",
    "Sandbox",
    "SandboxError",
    "SandboxLimits",
    "SandboxUnavailable",
    "UnpicklableCall",
]


def __getattr__(name: str) -> Any:
    home = _HOMES.get(name)
    if home is None:
        raise AttributeError(f"module 'sandbox' has no attribute {name!r}")
    value = getattr(importlib.import_module(home), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_HOMES))
