"""Results of read-only calls, kept while what they read is unchanged."""

from __future__ import annotations

import json
import logging
from collections.abc import Hashable, Mapping
from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel

from workspace_tools._result import ToolResult
from workspace_tools._tool import CacheKey, Tool

logger = logging.getLogger("workspace_tools")

#: Results a session keeps, the least recently used dropped first: a result holds its
#: content (up to the result length, 50,000 characters by default) and its details (a
#: grep's every match), and a process may run hundreds of sessions.
MAX_ENTRIES = 64


@dataclass(frozen=True)
class CachedResult:
    """A successful result, the step that produced it, and the fingerprint taken before it."""

    step: int
    fingerprint: Hashable
    result: ToolResult


class ResultCache:
    """Results keyed by tool name and validated arguments (canonical JSON).

    Only read-only tools with a cache key are cached: the tool's :attr:`Tool.cache_key`, or
    the one ``keys`` names for it. A hit needs the fingerprint taken now to equal the one
    taken before the earlier call ran; a stale entry is dropped, and past
    :data:`MAX_ENTRIES` the least recently used. A session clears everything
    (:meth:`clear`) before a call of a tool that :attr:`Tool.invalidates`, since no
    fingerprint can say what a command changed. A disabled cache keeps nothing.
    """

    def __init__(self, keys: Mapping[str, CacheKey], *, enabled: bool = True) -> None:
        self._keys = dict(keys)
        self._enabled = enabled
        self._entries: dict[tuple[str, str], CachedResult] = {}

    def fingerprint(self, tool: Tool[Any], args: BaseModel) -> Hashable | None:
        """What a call of ``tool`` with ``args`` reads; ``None`` when it is not cacheable.
        Take it before the call runs, so a change during the run is seen next time."""
        function = self._keys.get(tool.name, tool.cache_key)
        if function is None or not tool.read_only or not self._enabled:
            return None
        try:
            return function(args)
        except Exception:
            logger.exception("fingerprint of %s failed; the call is not cached", tool.name)
            return None

    def lookup(self, tool: Tool[Any], args: BaseModel) -> CachedResult | None:
        """The earlier result of this exact call while its fingerprint is unchanged."""
        key = _key(tool.name, args)
        entry = self._entries.get(key)
        if entry is None:
            return None
        del self._entries[key]
        if self.fingerprint(tool, args) != entry.fingerprint:
            return None
        self._entries[key] = entry  # now the most recently used
        return entry

    def store(self, tool: Tool[Any], args: BaseModel, entry: CachedResult) -> None:
        """Keep ``entry`` for later identical calls."""
        key = _key(tool.name, args)
        self._entries.pop(key, None)
        self._entries[key] = entry
        while len(self._entries) > MAX_ENTRIES:
            del self._entries[next(iter(self._entries))]

    def clear(self) -> None:
        """Forget every result."""
        self._entries.clear()


def _key(name: str, args: BaseModel) -> tuple[str, str]:
    dumped = args.model_dump(mode="json")
    return name, json.dumps(dumped, sort_keys=True, separators=(",", ":"))
