"""Workspace rules: path confinement, ignore rules, the walk, text encodings, atomic files."""

from workspace_tools.workspace._paths import ResolvedPath, resolve_path
from workspace_tools.workspace._workspace import Workspace, WorkspaceOptions, as_workspace

__all__ = ["ResolvedPath", "Workspace", "WorkspaceOptions", "as_workspace", "resolve_path"]
