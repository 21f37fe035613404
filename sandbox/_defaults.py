"""What a sandbox protects unless told otherwise: credential files no child may read, and
paths inside writable directories that tools on the host later execute."""

from __future__ import annotations

import contextlib
import os
import pwd
import secrets
import stat
import subprocess
from collections.abc import Iterable, Mapping

from sandbox.layers._realpath import realpath

#: Credential locations no sandboxed child may read by default. ``~/`` entries are taken in
#: the account's home (from the password database) and in ``$HOME`` when they differ.
#: ``Sandbox(allow_read=[...])`` brings one back.
CREDENTIAL_PATHS: tuple[str, ...] = (
    "~/.ssh",  # SSH private keys, agent sockets, known hosts
    "~/.gnupg",  # GnuPG private keys and trust database
    "~/.aws",  # AWS CLI and SDK credentials and SSO caches
    "~/.azure",  # Azure CLI tokens
    "~/.config/gcloud",  # Google Cloud SDK credentials and access tokens
    "~/.oci",  # Oracle Cloud CLI keys
    "~/.kube",  # kubectl configs with cluster certificates and tokens
    "~/.docker",  # docker login credentials (config.json "auths")
    "~/.config/containers/auth.json",  # podman and buildah registry logins
    "~/.netrc",  # logins curl, git, ftp and pip send to hosts
    "~/.pgpass",  # PostgreSQL passwords
    "~/.my.cnf",  # MySQL client passwords
    "~/.git-credentials",  # git's credential store helper
    "~/.config/git/credentials",  # the same store where $XDG_CONFIG_HOME is unset
    "~/.config/gh",  # GitHub CLI tokens (hosts.yml)
    "~/.config/hub",  # hub's GitHub token
    "~/.vault-token",  # HashiCorp Vault token
    "~/.terraform.d/credentials.tfrc.json",  # Terraform Cloud tokens
    "~/.terraformrc",  # Terraform CLI config with credentials blocks
    "~/.cache/huggingface/token",  # Hugging Face Hub token
    "~/.config/huggingface/token",  # the same, older layout
    "~/.codex/auth.json",  # Codex CLI login
    "~/.claude/.credentials.json",  # Claude Code login
    "~/.password-store",  # pass, the standard Unix password manager
    "~/.local/share/keyrings",  # GNOME keyring
    "~/.npmrc",  # npm registry tokens
    "~/.pypirc",  # PyPI upload tokens
    "~/.gem/credentials",  # RubyGems API key
    "~/.cargo/credentials.toml",  # crates.io token
    "~/.cargo/credentials",  # crates.io token (before Cargo 1.46)
    "~/.config/composer/auth.json",  # Composer registry logins
    "~/.composer/auth.json",  # Composer registry logins (older layout)
    "~/.m2/settings-security.xml",  # Maven's master password
    "/etc/shadow",  # password hashes
    "/etc/gshadow",  # group password hashes
)

#: Paths, relative to each writable directory, kept read-only by default because tools on
#: the host run what they hold: git runs hooks and ``core.fsmonitor``/``core.hooksPath``
#: and filters from ``.git/config`` on ``git status``; direnv runs ``.envrc`` on ``cd``;
#: editors run tasks and settings on folder open; dev containers run
#: ``initializeCommand`` on the host; commit hook managers run what they list.
#: ``Sandbox(host_exec_paths=())`` allows writes to them.
HOST_EXEC_PATHS: tuple[str, ...] = (
    ".git",  # hooks, config (fsmonitor, hooksPath, filters, aliases), or a gitdir pointer
    ".envrc",  # direnv
    ".vscode",  # VS Code tasks.json (runOn folderOpen), settings.json, launch.json
    ".idea",  # JetBrains run configurations and startup tasks
    ".devcontainer",  # initializeCommand runs on the host
    ".husky",  # git hooks installed by husky (core.hooksPath)
    ".pre-commit-config.yaml",  # commands the pre-commit hook runs
    ".claude",  # Claude Code: settings.json hooks run shell commands on the host
    ".mcp.json",  # MCP servers a coding assistant starts for the project
    ".cursor",  # Cursor: mcp.json servers, as above
    ".gemini",  # Gemini CLI: settings.json MCP servers and tool discovery commands
)


def homes(environ: Mapping[str, str]) -> list[str]:
    """The account's home directory from the password database and ``$HOME`` (one entry
    when they are the same; absolute, symbolic links resolved)."""
    found = []
    with contextlib.suppress(KeyError):  # a uid without an entry (some containers)
        found.append(pwd.getpwuid(os.getuid()).pw_dir)
    if os.path.isabs(environ.get("HOME", "")):
        found.append(environ["HOME"])
    return list(dict.fromkeys(realpath(home) for home in found))


def credential_paths(home_dirs: Iterable[str]) -> list[str]:
    """:data:`CREDENTIAL_PATHS` as absolute paths, each ``~/`` entry once per home."""
    paths = []
    home_dirs = list(home_dirs)
    for entry in CREDENTIAL_PATHS:
        if entry.startswith("~/"):
            paths += [os.path.join(home, entry[2:]) for home in home_dirs]
        else:
            paths.append(entry)
    return paths


def without_allowed(denied: Iterable[str], allowed: Iterable[str]) -> tuple[str, ...]:
    """``denied`` less every entry equal to or beneath a path of ``allowed`` (absolute,
    resolved paths).

    Raises:
        ValueError: an allowed path lies strictly inside a path that stays denied (a file
            cannot be shown inside a hidden directory); the message names the directory.
    """
    allowed = list(allowed)
    kept = tuple(p for p in denied if not any(_within(a, p) for a in allowed))
    for path in allowed:
        for entry in kept:
            if _within(entry, path):
                raise ValueError(
                    f"allow_read {path!r} lies inside {entry!r}, which stays denied; "
                    f"allow {entry!r} instead"
                )
    return kept


def read_only_paths(writable: Iterable[str], names: Iterable[str]) -> tuple[str, ...]:
    """Each of ``names`` (relative paths) inside each of the ``writable`` directories."""
    names = list(names)
    return tuple(os.path.join(root, name) for root in writable for name in names)


def git_exec_paths(writable: Iterable[str]) -> tuple[str, ...]:
    """Paths inside the ``writable`` directories, beyond ``.git`` itself, that git's
    configuration of the repository holding each names as what git runs: its hooks
    directory when ``core.hooksPath`` puts it in the work tree (``.githooks``, husky's
    ``.husky/_``), and ``core.fsmonitor`` when it names a program there. Asked of git
    itself (``git rev-parse --git-path hooks``, ``git config``: system, global and the
    repository's own configuration, includes followed), as the host's git will read
    them; none where git is absent or no repository holds the directory."""
    found: list[str] = []
    for directory in writable:
        top_and_hooks = _git(directory, "rev-parse", "--show-toplevel", "--git-path", "hooks")
        if top_and_hooks is None or len(top_and_hooks.splitlines()) != 2:
            continue
        top, hooks = top_and_hooks.splitlines()
        named = [os.path.join(directory, hooks)]
        monitor = _git(directory, "config", "--get", "core.fsmonitor")
        if monitor and monitor.strip().lower() not in _GIT_BOOLEANS:
            named.append(os.path.join(top, monitor.strip()))
        for path in named:
            path = os.path.normpath(path)
            if _within(directory, path) and not _within(os.path.join(directory, ".git"), path):
                found.append(path)
    return tuple(dict.fromkeys(found))


#: What ``core.fsmonitor`` may hold besides a program (git's boolean spellings).
_GIT_BOOLEANS = frozenset({"", "true", "false", "yes", "no", "on", "off", "1", "0"})


def _git(directory: str, *args: str) -> str | None:
    """git's output for ``args`` run in ``directory``, or ``None`` when it fails."""
    try:
        done = subprocess.run(
            ["git", "-C", directory, *args],
            stdin=subprocess.DEVNULL,
            capture_output=True,
            text=True,
            timeout=10,
            check=False,
            env={**os.environ, "GIT_OPTIONAL_LOCKS": "0"},
        )
    except (OSError, subprocess.SubprocessError, UnicodeDecodeError):
        return None
    return done.stdout.rstrip("\n") if done.returncode == 0 else None


#: A name's identity: ``st_dev``, ``st_ino``, file type, and a link's target (else
#: ``""``). A file removed and another made at once often gets the same inode number
#: back, so for a link, which no layer can bind, the target is what tells them apart.
Identity = tuple[int, int, int, str]

#: A protected path as a child found it: the writable directory holding it, the path's
#: names beneath that directory, and the :data:`Identity` of each of those that existed,
#: in order (none past a symbolic link).
Guard = tuple[str, tuple[str, ...], tuple[Identity, ...]]


def guards(paths: Iterable[str], writable: Iterable[str]) -> tuple[Guard, ...]:
    """What :func:`set_aside` compares with after a child: each of ``paths`` that lies in
    one of the ``writable`` directories (the most specific), with what exists of it now
    (``lstat`` of each prefix, links not followed). A path that exists with no link on its
    way is left out: the layers bind it and pin the directories above it, so no child can
    change any of its names, and a change there is the host's own (an editor saving
    ``.envrc`` anew), not to be set aside."""
    roots = sorted(writable, key=len, reverse=True)
    found = []
    for path in paths:
        root = next((r for r in roots if r != path and _within(r, path)), None)
        if root is None:
            continue
        names = tuple(os.path.relpath(path, root).split(os.sep))
        known = []
        prefix = root
        for name in names:
            prefix = os.path.join(prefix, name)
            try:
                info = os.lstat(prefix)
                known.append(_identity(info, prefix))
            except OSError:
                break
            if stat.S_ISLNK(info.st_mode):
                break
        bound = len(known) == len(names) and not stat.S_ISLNK(info.st_mode)
        if not bound:
            found.append((root, names, tuple(known)))
    return tuple(found)


def set_aside(guarded: Iterable[Guard]) -> list[str]:
    """After a child: for each protected path, rename the first of its names (from its
    writable directory down) that is not what :func:`guards` found before the child, to
    ``NAME.sandbox-blocked`` (with a random suffix when that name is taken), so that no
    tool on the host finds what the child put there under its own name; nothing is
    deleted. Returns the new paths.

    That catches a protected path the child created (bind mounts keep only existing paths
    read-only, and binding a stand-in over an absent one would leave it on the host), and
    a name on its way that the child swapped (a directory or link put where a link or an
    absent directory was, so that the host's tools would reach a protected path of the
    child's making). The walk follows no link: it opens each directory beneath the one
    before it with ``O_NOFOLLOW`` and renames within it, so a link the child made cannot
    turn the rename onto a host path outside the writable directory. A name the child
    removed is left gone."""
    moved = []
    for root, names, known in guarded:
        try:
            fd = os.open(root, _DIRECTORY)
        except OSError:
            continue
        try:
            for depth, name in enumerate(names):
                try:
                    info = os.stat(name, dir_fd=fd, follow_symlinks=False)
                    same = depth < len(known) and _identity(info, name, fd) == known[depth]
                except OSError:
                    break  # gone: nothing of the child's is there
                if not same:
                    target = _aside(fd, name)
                    if target is not None:
                        moved.append(os.path.join(root, *names[:depth], target))
                    break
                if depth == len(names) - 1 or not stat.S_ISDIR(info.st_mode):
                    break  # as it was (a link is not followed)
                try:
                    inner = os.open(name, _DIRECTORY | os.O_NOFOLLOW, dir_fd=fd)
                except OSError:
                    break
                os.close(fd)
                fd = inner
        finally:
            os.close(fd)
    return moved


_DIRECTORY = getattr(os, "O_PATH", os.O_RDONLY) | os.O_DIRECTORY | os.O_CLOEXEC


def _identity(info: os.stat_result, path: str, fd: int | None = None) -> Identity:
    target = os.readlink(path, dir_fd=fd) if stat.S_ISLNK(info.st_mode) else ""
    return info.st_dev, info.st_ino, stat.S_IFMT(info.st_mode), target


def _aside(fd: int, name: str) -> str | None:
    """Rename ``name`` in the directory ``fd`` to ``NAME.sandbox-blocked`` (a random suffix
    when that is taken); the new name, or ``None`` when it was gone meanwhile or cannot be
    renamed (the supervisor calling this must go on to report the command's end)."""
    target = f"{name}.sandbox-blocked"
    if _exists(target, fd):
        target = f"{target}-{secrets.token_hex(4)}"
    try:
        os.rename(name, target, src_dir_fd=fd, dst_dir_fd=fd)
    except OSError:
        return None
    return target


def _exists(name: str, fd: int) -> bool:
    try:
        os.stat(name, dir_fd=fd, follow_symlinks=False)
    except OSError:
        return False
    return True


def _within(directory: str, path: str) -> bool:
    return path == directory or path.startswith(directory.rstrip("/") + "/")
