"""Which calls a session lets run: named rules, first match wins, each deciding allow/deny/ask."""

from __future__ import annotations

import json
import posixpath
import re
from collections.abc import Sequence
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, field_validator, model_validator
from wcmatch import glob as wcglob

from workspace_tools._errors import ECHO_LIMIT, ToolError, clipped, echoed
from workspace_tools._tool import Tool
from workspace_tools.workspace import Workspace

Decision = Literal["allow", "deny", "ask"]

_GLOB_FLAGS = wcglob.GLOBSTAR | wcglob.DOTGLOB | wcglob.BRACE


def as_typed(text: str, limit: int = ECHO_LIMIT) -> str:
    """``text`` in single quotes as the user typed it: ``repr`` would double each backslash
    of a regex (``\\brm\\b``), which the user then cannot recognise or copy back. Over
    ``limit`` characters, its first ``limit`` with ``…`` before the closing quote and its
    length after (``'xxx…' (100,000 characters)``), as :func:`echoed` quotes a value."""
    if len(text) <= limit:
        return f"'{text}'"
    return f"'{text[:limit]}…' ({len(text):,} characters)"


class ArgumentCondition(BaseModel):
    """A test of one argument of a call; a rule applies only when all its conditions hold.

    Exactly one of ``pattern`` and ``glob`` is set.

    Attributes:
        argument: the argument's name (``command``, ``path``).
        pattern: a Python regular expression searched (``re.search``) in the argument as
            given; a value that is not a string is tested as its compact JSON.
        glob: a wcmatch glob (``**`` any depth, braces, dot files included) matched against
            the argument as a workspace path: resolved with every symlink followed, relative
            to the root, ``/`` separators. So ``src/link/a.py`` with ``src/link -> ../etc``
            is tested as ``etc/a.py``. A path that cannot be resolved (outside the root) is
            tested as written, normalised. Use ``src{,/**}`` for a directory and its contents.
        negate: the condition holds when the argument does *not* match.

    A call whose tool has no such argument never satisfies the condition, negated or not:
    ``path!=src/**`` says nothing about ``run_command``. A tool that names its files
    elsewhere (:attr:`Tool.paths`: ``apply_patch``'s patch text) is tested as if each file
    it names were its ``path`` argument (see :meth:`Policy.decide`).
    """

    model_config = ConfigDict(frozen=True)

    argument: str
    pattern: str | None = None
    glob: str | None = None
    negate: bool = False

    @field_validator("pattern")
    @classmethod
    def _compiles(cls, value: str | None) -> str | None:
        if value is not None:
            try:
                re.compile(value)
            except re.error as exc:
                raise ValueError(f"invalid regular expression {as_typed(value)}: {exc}") from exc
        return value

    @model_validator(mode="after")
    def _one_test(self) -> ArgumentCondition:
        if (self.pattern is None) == (self.glob is None):
            raise ValueError("an argument condition needs exactly one of pattern and glob")
        return self

    def holds(self, arguments: dict[str, Any], workspace: Workspace | None) -> bool | None:
        """Whether the condition holds for JSON ``arguments`` (a validated model's dump);
        ``None`` when it cannot tell: a glob tested on a path that cannot be placed in the
        workspace (:func:`workspace_path`)."""
        if self.argument not in arguments:
            return False
        value = arguments[self.argument]
        if self.pattern is not None:
            text = value if isinstance(value, str) else json.dumps(value, separators=(",", ":"))
            matched = re.search(self.pattern, text) is not None
        else:
            assert self.glob is not None
            path = workspace_path(str(value), workspace)
            if path is None:
                return None
            matched = wcglob.globmatch(path, self.glob, flags=_GLOB_FLAGS)
        return matched != self.negate

    def unplaced(self, arguments: dict[str, Any], workspace: Workspace | None) -> str | None:
        """The path this condition cannot place in the workspace (``holds`` is ``None``)."""
        if self.glob is None or self.argument not in arguments:
            return None
        value = str(arguments[self.argument])
        return value if workspace_path(value, workspace) is None else None


def workspace_path(value: str, workspace: Workspace | None) -> str | None:
    """A path argument as policy globs see it: real, root-relative, ``/``-separated.

    For a path the workspace refuses (the tool refuses it too), the value normalised
    lexically (``./src/../a`` is ``a``). Without a workspace (a remote workspace's tools),
    the value normalised lexically, or ``None`` when that cannot be placed in the workspace:
    an absolute path, or one that climbs above the root (``../x``); the tool's side would
    place it, so a glob must not judge it as written.
    """
    normal = posixpath.normpath(value.replace("\\", "/"))
    if workspace is not None:
        try:
            return workspace.rel(workspace.resolve(value).real)
        except ToolError:
            return normal
    if normal.startswith("/") or normal == ".." or normal.startswith("../"):
        return None
    return normal


class PolicyRule(BaseModel):
    """One named rule: when it applies to a call, its ``decision`` is the policy's answer.

    Attributes:
        name: shown in step records (``denied_by``) and to the model.
        decision: ``allow`` (run), ``deny`` (do not run) or ``ask`` (the confirmation
            callback decides).
        tools: tool names the rule covers; ``None`` covers every tool.
        read_only: when set, the rule covers only tools whose ``read_only`` flag equals it
            (``read_only=False`` means every tool that may change something).
        when: argument conditions that must all hold.
        reason: what the model reads when the rule denies a call.
    """

    model_config = ConfigDict(frozen=True)

    name: str
    decision: Decision
    tools: tuple[str, ...] | None = None
    read_only: bool | None = None
    when: tuple[ArgumentCondition, ...] = ()
    reason: str | None = None

    def applies(
        self, tool: Tool[Any], arguments: dict[str, Any], workspace: Workspace | None
    ) -> bool:
        """Whether the rule covers this call of ``tool`` with JSON ``arguments``."""
        if self.tools is not None and tool.name not in self.tools:
            return False
        if self.read_only is not None and tool.read_only != self.read_only:
            return False
        held = [condition.holds(arguments, workspace) for condition in self.when]
        if False in held:
            return False
        # A condition that cannot tell (a path no local workspace places) is taken the
        # strict way: a rule that denies or asks covers the call, one that allows does not,
        # so no spelling of a path gets past a rule that names it.
        return None not in held or self.decision != "allow"

    def unplaced(self, arguments: dict[str, Any], workspace: Workspace | None) -> str | None:
        """The first path this rule's conditions cannot place in the workspace, if any."""
        for condition in self.when:
            path = condition.unplaced(arguments, workspace)
            if path is not None:
                return path
        return None


class PolicyDecision(BaseModel):
    """The policy's answer for one call: the decision and the rule that gave it."""

    decision: Decision
    rule: str
    reason: str | None = None


DEFAULT_RULE_NAME = "default"


class Policy(BaseModel):
    """An ordered list of rules and a default: the first rule that applies decides.

    Serialises with pydantic (``Policy.model_validate_json(text)`` loads a saved one).
    The default's rule name is ``"default"``. A ``pattern`` rule on a command is a guard
    rail against mistakes, not a security boundary (``r''m`` is ``rm`` to the shell); the
    sandbox is the boundary.
    """

    model_config = ConfigDict(frozen=True)

    rules: tuple[PolicyRule, ...] = ()
    default: Decision = "allow"

    def decide(
        self, tool: Tool[Any], arguments: BaseModel, workspace: Workspace | None = None
    ) -> PolicyDecision:
        """The decision for a call of ``tool`` with validated ``arguments``.

        A tool with no ``path`` argument that names files all the same (:attr:`Tool.paths`,
        e.g. ``apply_patch``, whose paths are in its patch text) is decided once per file it
        names, that file standing as its ``path`` argument, and the call gets the strictest
        of those decisions (``deny`` over ``ask`` over ``allow``): a patch that touches one
        denied file among allowed ones is denied, as that file written alone would be.
        """
        dumped = arguments.model_dump(mode="json")
        views = [dumped]
        if tool.paths is not None and PATH_ARGUMENT not in dumped:
            named = list(dict.fromkeys(tool.paths(arguments)))
            views = [{**dumped, PATH_ARGUMENT: path} for path in named] or views
        decisions = [self._first_match(tool, view, workspace) for view in views]
        return max(decisions, key=lambda decision: _STRICTNESS[decision.decision])

    def _first_match(
        self, tool: Tool[Any], dumped: dict[str, Any], workspace: Workspace | None
    ) -> PolicyDecision:
        for rule in self.rules:
            if rule.applies(tool, dumped, workspace):
                unplaced = rule.unplaced(dumped, workspace)
                reason = rule.reason
                if unplaced is not None and reason is None:
                    reason = (
                        f"the policy cannot tell where {echoed(unplaced)} lies in the workspace "
                        "(no local workspace resolves it); name the path relative to the "
                        "workspace root"
                    )
                return PolicyDecision(decision=rule.decision, rule=rule.name, reason=reason)
        return PolicyDecision(decision=self.default, rule=DEFAULT_RULE_NAME)


PATH_ARGUMENT = "path"
"""The argument a tool's named files (:attr:`Tool.paths`) stand as when it has none of its own."""

_STRICTNESS: dict[Decision, int] = {"allow": 0, "ask": 1, "deny": 2}


ALLOW_ALL = Policy()


def check_policy(policy: Policy, tools: Sequence[Tool[Any]]) -> None:
    """Refuse a policy that can never match as written: a rule naming a tool that is not in
    ``tools``, or a condition on an argument none of the rule's tools takes (a typo would
    otherwise leave a guard that silently never applies).

    Raises:
        ValueError: one line naming the rule, what is unknown, and what exists.
    """
    by_name = {t.name: t for t in tools}
    for rule in policy.rules:
        unknown = [name for name in rule.tools or () if name not in by_name]
        if unknown:
            raise ValueError(
                f"policy rule {as_typed(rule.name)} names "
                f"{'an unknown tool' if len(unknown) == 1 else 'unknown tools'} "
                f"{', '.join(clipped(name, ECHO_LIMIT) for name in unknown)}; "
                f"the tools are: {', '.join(by_name)}"
            )
        covered = [by_name[name] for name in rule.tools] if rule.tools else list(tools)
        arguments = {field for t in covered for field in t.parameters.model_fields}
        if any(t.paths is not None for t in covered):
            arguments.add(PATH_ARGUMENT)  # their named files stand as ``path`` (Policy.decide)
        for condition in rule.when:
            if condition.argument not in arguments:
                raise ValueError(
                    f"policy rule {as_typed(rule.name)} tests argument "
                    f"{condition.argument!r}, which its tools do not take; they take: "
                    f"{', '.join(sorted(arguments))}"
                )
