"""A general subprocess sandbox: runs a command or a Python callable in a child process
under limits, and says which protections it really enforced."""

from sandbox._defaults import CREDENTIAL_PATHS, HOST_EXEC_PATHS
from sandbox._env import DEFAULT_ENV_ALLOWLIST
from sandbox._errors import SandboxError, SandboxUnavailable, UnpicklableCall
from sandbox._limits import SandboxLimits
from sandbox._sandbox import Sandbox
from sandbox.layers._confinement import Confinement
from sandbox.spawn._capture import CapturedOutput
from sandbox.spawn._process import ProcessResult

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
