"""The environment a sandboxed child starts with."""

from __future__ import annotations

from collections.abc import Collection, Mapping

#: Variables a child keeps by default: what programs need to find tools, speak the right
#: locale and find a home, their configuration (``XDG_CONFIG_HOME``, and git's global config
#: file ``GIT_CONFIG_GLOBAL``: where git's global excludes file is, so that a sandboxed
#: listing ignores what an unsandboxed one does) and a temp dir. Nothing that carries
#: credentials.
DEFAULT_ENV_ALLOWLIST: frozenset[str] = frozenset(
    {
        "PATH",
        "HOME",
        "XDG_CONFIG_HOME",
        "GIT_CONFIG_GLOBAL",
        "USER",
        "LOGNAME",
        "SHELL",
        "LANG",
        "LANGUAGE",
        "TERM",
        "TZ",
        "TMPDIR",
        "PWD",
        "COLUMNS",
        "LINES",
        "NO_COLOR",
    }
)


def allowlisted_env(
    environ: Mapping[str, str], allowlist: Collection[str] = DEFAULT_ENV_ALLOWLIST
) -> dict[str, str]:
    """The variables of ``environ`` named in ``allowlist``, plus every ``LC_*`` locale
    variable (POSIX locale categories)."""
    return {
        name: value
        for name, value in environ.items()
        if name in allowlist or name.startswith("LC_")
    }
