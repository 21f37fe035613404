"""A general subprocess sandbox: runs a command or a Python callable in a child process
under limits, and says which protections it really enforced."""

from ._capture import CapturedOutput
from ._confinement import Confinement
from ._defaults import CREDENTIAL_PATHS, HOST_EXEC_PATHS
from ._env import DEFAULT_ENV_ALLOWLIST
from ._errors import SandboxError, SandboxUnavailable
from ._limits import SandboxLimits
from ._process import ProcessResult
from ._sandbox import Sandbox

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
]
