"""The command line: ``workspace-tools call``, ``mcp``, ``schema`` and ``demo``."""

from workspace_tools.cli._main import main

__all__ = ["main"]
