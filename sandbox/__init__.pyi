"""The names of ``sandbox`` for type checkers, and the lazy loader's map of which module
holds each (``lazy_loader.attach_stub``: relative imports only)."""

from ._defaults import CREDENTIAL_PATHS, HOST_EXEC_PATHS
from ._env import DEFAULT_ENV_ALLOWLIST
from ._errors import SandboxError, SandboxUnavailable, UnpicklableCall
from ._limits import SandboxLimits
from ._sandbox import Sandbox
from .layers._confinement import Confinement
from .spawn._capture import CapturedOutput
from .spawn._client import COMMAND_OWNER
from .spawn._process import ProcessResult

__all__ = [
    "COMMAND_OWNER",
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
