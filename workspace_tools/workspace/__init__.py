"""Workspace rules: path confinement, ignore rules, the walk, text encodings, atomic files."""

from ._paths import ResolvedPath, resolve_path
from ._workspace import Workspace, WorkspaceOptions, as_workspace

__all__ = ["ResolvedPath", "Workspace", "WorkspaceOptions", "as_workspace", "resolve_path"]
