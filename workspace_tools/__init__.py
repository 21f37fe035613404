"""Ready-made file, search and command tools for coding agents, and the model to define more.

The public API is what ``__all__`` lists, each name loaded on first use (so that a process
that needs one part, a sandbox's worker or the command line, imports only that part);
everything in underscore modules is private. It covers defining a tool (``tool``,
``ToolContext``, ``tool_output``, ``tool_content`` and its parts, ``ToolPresentation``,
``ToolError``, ``ErrorCode``, ``ToolState``), invoking one (``invoke_tool``,
``invoke_tool_sync``, ``ToolResult``, ``ToolUpdate``), the eight tools (``workspace_tools``,
``Workspace``, ``WorkspaceOptions``), the persistent shell and background processes
(``ShellSession``, ``shell_tools``), sessions of calls (``ToolSession``, ``Policy``,
``PolicyRule``, ``ArgumentCondition``, ``ConfirmationRequest``, ``Confirmation``,
``SessionRecord``), and streams and transcripts of calls (the ``Tool*Event`` models,
``parse_tool_event``, ``ToolHistoryEntry``). The command line and its policy flags are in
:mod:`workspace_tools.cli._main`, the MCP elicitation form in
:mod:`workspace_tools.adapters.mcp`.
"""

import importlib
import importlib.util
import sys

import lazy_loader

# The names and where each lives are in __init__.pyi, which type checkers read too.
_load_public, __dir__, __all__ = lazy_loader.attach_stub(__name__, __file__)


def __getattr__(name: str) -> object:
    """The public ``name``, loaded on first use; else a subpackage or module of this package
    (``workspace_tools.tools.read_file.execute`` after ``import workspace_tools``, as when
    the package imported its parts eagerly), imported on first use.

    Raises:
        AttributeError: neither, in Python's own words for a module.
    """
    if name in __all__:
        return _load_public(name)
    if not name.startswith("_") and importlib.util.find_spec(f"{__name__}.{name}") is not None:
        return importlib.import_module(f"{__name__}.{name}")
    raise AttributeError(
        f"module {__name__!r} has no attribute {name!r}", name=name, obj=sys.modules[__name__]
    )


__version__ = "0.1.0"
