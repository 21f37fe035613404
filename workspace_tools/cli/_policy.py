"""Policy rules as command-line flags: ``--allow|--ask|--deny TOOLS[:ARG OP VALUE]``.

The flag grammar belongs to the command line (``workspace-tools mcp``); a program builds a
:class:`~workspace_tools.Policy` from :class:`~workspace_tools.PolicyRule` values.
"""

from __future__ import annotations

import argparse
import re
from collections.abc import Sequence
from typing import Any

from pydantic import ValidationError

from workspace_tools.session._policy import (
    ArgumentCondition,
    Decision,
    Policy,
    PolicyRule,
    as_typed,
)

_CONDITION = re.compile(r"(?P<arg>[A-Za-z_][A-Za-z0-9_]*)(?P<op>!=|!~|=|~)(?P<value>.*)", re.S)


def parse_policy_flag(decision: Decision, spec: str) -> PolicyRule:
    """A rule from one command-line flag value, named after the flag (``--deny run_command``).

    Grammar: ``TOOLS[:ARG OP VALUE]`` where ``TOOLS`` is ``*`` or comma-separated tool
    names and ``OP`` is ``~`` (regex search), ``!~`` (regex does not match), ``=`` (path
    glob, see :class:`ArgumentCondition`) or ``!=`` (path glob does not match). Examples:
    ``run_command``, ``run_command:command~\\brm\\b``, ``write_file,edit_file:path!=src/**``.

    Raises:
        ValueError: an empty tool list, a malformed condition, or an invalid regex.
    """
    tools_part, sep, condition_part = spec.partition(":")
    names = tuple(name.strip() for name in tools_part.split(",") if name.strip())
    if not names:
        raise ValueError(f"policy flag {as_typed(spec)} names no tool (use '*' for every tool)")
    when: tuple[ArgumentCondition, ...] = ()
    if sep:
        match = _CONDITION.fullmatch(condition_part)
        if match is None:
            raise ValueError(
                f"policy condition {as_typed(condition_part)} is not ARG~REGEX, ARG!~REGEX, "
                "ARG=GLOB or ARG!=GLOB"
            )
        op, value = match["op"], match["value"]
        kind = "pattern" if op.endswith("~") else "glob"
        condition = {"argument": match["arg"], kind: value, "negate": op.startswith("!")}
        try:
            when = (ArgumentCondition.model_validate(condition),)
        except ValidationError as exc:
            reason = exc.errors(include_url=False)[0]["msg"].removeprefix("Value error, ")
            raise ValueError(f"policy condition {as_typed(condition_part)}: {reason}") from exc
    return PolicyRule(
        name=f"--{decision} {spec}",
        decision=decision,
        tools=None if names == ("*",) else names,
        when=when,
    )


def policy_from_flags(flags: Sequence[tuple[Decision, str]], default: Decision = "allow") -> Policy:
    """A policy from ``(decision, spec)`` pairs in command-line order (first match wins).

    ``[("allow", "read_file"), ("deny", "*")]`` lets only ``read_file`` run.

    Raises:
        ValueError: a flag value :func:`parse_policy_flag` rejects.
    """
    return Policy(rules=tuple(parse_policy_flag(d, s) for d, s in flags), default=default)


class _PolicyFlagAction(argparse.Action):
    """Appends ``(decision, value)`` to one shared list so flag order is kept."""

    def __call__(
        self,
        parser: argparse.ArgumentParser,
        namespace: argparse.Namespace,
        values: str | Sequence[Any] | None,
        option_string: str | None = None,
    ) -> None:
        flags = list(getattr(namespace, self.dest) or [])
        decision = self.const
        try:
            parse_policy_flag(decision, str(values))
        except ValueError as exc:
            parser.error(str(exc))
        flags.append((decision, str(values)))
        setattr(namespace, self.dest, flags)


def add_policy_arguments(parser: argparse.ArgumentParser) -> None:
    """Add ``--allow``, ``--ask`` and ``--deny`` (repeatable, order kept) to ``parser``.

    Read them back with :func:`policy_from_arguments`.
    """
    for decision in ("allow", "ask", "deny"):
        parser.add_argument(
            f"--{decision}",
            dest="policy_flags",
            action=_PolicyFlagAction,
            const=decision,
            metavar="TOOLS[:ARG(~|!~|=|!=)VALUE]",
            help=f"{decision} matching calls (first matching flag wins; repeatable)",
        )


def policy_from_arguments(namespace: argparse.Namespace) -> Policy:
    """The policy of the flags :func:`add_policy_arguments` parsed (allow-all without any)."""
    return policy_from_flags(getattr(namespace, "policy_flags", None) or [])
