"""The warm grep index's builds on one spawn server that a test module (or a test) holds."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import anyio

from sandbox import Sandbox
from workspace_tools.search import _index


@contextmanager
def index_build_server() -> Iterator[Callable[..., Any]]:
    """A stand-in for ``_index._in_child`` on one spawn server: each build still runs in a
    child of a clean interpreter, with the same limits and no environment, but the server
    (most of a build's cost) starts once, not once a build. Closed on leaving."""
    box = Sandbox(layers=False, env_allowlist=(), limits=_index._BUILD_LIMITS)

    def in_child(control: Any, work: Callable[..., Any], *args: Any) -> Any:
        # The server is the test's: stopping a build (control) is left to the real one.
        try:
            return anyio.run(box.call, work, *args)
        except Exception:
            return None  # as _in_child: no build, so no index

    try:
        yield in_child
    finally:
        box.close()
