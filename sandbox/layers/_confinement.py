"""What a sandboxed child may touch: the contract between the sandbox core and its layers."""

from __future__ import annotations

import os
from collections.abc import Iterable
from dataclasses import dataclass

from sandbox.layers._realpath import realpath


@dataclass(frozen=True)
class Confinement:
    """Filesystem, network and process restrictions for one sandboxed child.

    Primitives only, so isolation layers (bubblewrap, Landlock, seccomp, cgroup v2)
    never depend on `workspace_tools`.

    Attributes:
        writable: absolute directories writes are allowed in (workspace root, private tmp).
        read_denied: absolute paths whose contents must not be readable.
        read_only: absolute paths inside ``writable`` directories that stay read-only
            (tools on the host execute what they hold; see ``HOST_EXEC_PATHS``).
        network: False forbids TCP/UDP and host Unix sockets.
        max_processes: cap on simultaneous processes in the child's tree, None for no cap.
    """

    writable: tuple[str, ...] = ()
    read_denied: tuple[str, ...] = ()
    read_only: tuple[str, ...] = ()
    network: bool = True
    max_processes: int | None = None


def pinned_directories(
    writable: Iterable[str], read_only: Iterable[str], read_denied: Iterable[str] = ()
) -> list[str]:
    """The directories a mount layer binds over themselves (writable still) so that no
    child can rename or remove them: those strictly between each existing ``read_only``
    or ``read_denied`` path and the writable directory it lies in, when that is the most
    specific entry holding it (other than ``/``). All paths are resolved (``realpath``);
    parents first.

    A layer binds a protected path where it is when the child starts, and the kernel
    refuses to rename or remove a mount point in its own namespace (``EBUSY``,
    rename(2)), but not a directory above one: a child that renamed ``config`` would
    carry a denied ``config/secrets.env`` along to a path the next child's layers do not
    cover, and one that renamed ``scripts`` could put a hooks directory of its own in
    ``scripts/hooks``."""
    entries = [realpath(path) for path in writable if os.path.lexists(path)]
    kinds = dict.fromkeys(entries, True)
    protected = [realpath(p) for p in (*read_only, *read_denied) if os.path.lexists(p)]
    kinds.update(dict.fromkeys(protected, False))
    pinned: dict[str, None] = {}
    for path in protected:
        holder = max((e for e in kinds if e != path and _within(e, path)), key=len, default=None)
        if holder is None or holder == "/" or not kinds[holder]:
            continue  # beneath no writable directory, or a child that may write anywhere
        parent = os.path.dirname(path)
        between = []
        while parent != holder and _within(holder, parent):
            between.append(parent)
            parent = os.path.dirname(parent)
        pinned.update(dict.fromkeys(reversed(between)))
    return sorted(pinned, key=lambda p: (p.count("/"), p))


def _within(directory: str, path: str) -> bool:
    return path == directory or path.startswith(directory.rstrip("/") + "/")
