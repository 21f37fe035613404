"""What a sandboxed child may touch: the contract between the sandbox core and its layers."""

from __future__ import annotations

from dataclasses import dataclass


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
