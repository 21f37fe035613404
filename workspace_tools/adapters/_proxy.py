"""Tools that look like :func:`workspace_tools`'s but run elsewhere (a server, an actor)."""

from __future__ import annotations

import dataclasses
import tempfile
from typing import Any

from workspace_tools._tool import Execute, Tool
from workspace_tools.tools import workspace_tools


def proxy_tools(make_execute: Any, **options: Any) -> list[Tool[Any]]:
    """The eight tools with the local names, argument models, descriptions, presentations
    and read-only flags, each running ``make_execute(local_tool)`` instead.

    ``options``: the :class:`WorkspaceOptions` that shape the argument models (as the
    remote workspace was made with). The copies have no timeout (the remote side keeps its
    own), no ``cache_key`` (a local fingerprint cannot see remote files), no state, no
    sandbox (the remote side has its own) and no workspace (none is local);
    ``invalidates_cache`` keeps the local answer.
    """
    # The local definitions need a directory; it only exists while they are built (their
    # execute is replaced, never run).
    with tempfile.TemporaryDirectory() as template:
        local = workspace_tools(template, **options)
    out = []
    for tool in local:
        execute: Execute = make_execute(tool)
        out.append(
            dataclasses.replace(
                tool,
                execute=execute,
                timeout=None,
                state=None,
                cache_key=None,
                invalidates_cache=tool.invalidates,
                sandbox=None,
                # The template directory is gone: the tools work on no local workspace
                # (a session's policy then places no absolute path; no checkpoints).
                workspace=None,
            )
        )
    return out
