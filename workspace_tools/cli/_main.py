"""The ``workspace-tools`` command line: ``call``, ``mcp``, ``serve``, ``schema``, ``demo``,
and ``checkpoints`` and ``restore`` for the checkpoints an MCP server kept."""

from __future__ import annotations

import argparse
import contextlib
import functools
import json
import math
import os
import re
import sys
from collections.abc import Callable, Sequence
from typing import Any, NoReturn, TextIO

import anyio

from sandbox import Sandbox, SandboxUnavailable
from workspace_tools import __version__
from workspace_tools._errors import ECHO_LIMIT, ErrorCode, ToolError, clipped, json_kind_phrase
from workspace_tools._events import (
    ToolCallEndEvent,
    ToolCallStartEvent,
    ToolResultEvent,
    ToolUpdateEvent,
)
from workspace_tools._result import ToolUpdate, content_text
from workspace_tools._tool import Tool
from workspace_tools.cli._demo import run_demo as play_demo
from workspace_tools.cli._policy import add_policy_arguments, policy_from_arguments
from workspace_tools.cli._terminal import for_terminal, format_presentation
from workspace_tools.session._checkpoints import Checkpoints
from workspace_tools.session._pipeline import invoke_tool_sync, validate_arguments
from workspace_tools.session._policy import as_typed
from workspace_tools.session._session import ToolSession
from workspace_tools.session._undo import CheckpointedCalls, sandbox_protected
from workspace_tools.tools import ShellSession, shell_tools, workspace_tools
from workspace_tools.workspace import Workspace

USAGE_ERROR = 2
SCHEMA_FORMATS = ("mcp", "openai", "openai-responses", "anthropic")


class UsageError(Exception):
    """A command line the program cannot run; the message is one line for the user."""


def parse_key_values(pairs: Sequence[str]) -> dict[str, str]:
    """``["path=a.txt", "limit=5"]`` -> ``{"path": "a.txt", "limit": "5"}``.

    Values stay strings; the tool's argument model converts them (``"5"`` to 5,
    ``"true"`` to True). Use ``--json`` for lists and objects.

    Raises:
        UsageError: a pair without ``=``.
    """
    out: dict[str, str] = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key:
            raise UsageError(
                f"argument {as_typed(pair)} is not key=value (or use --json '{{...}}')"
            )
        out[key] = value
    return out


def _with_pairs(given: Any, pairs: dict[str, str]) -> dict[str, Any]:
    """``--json``'s object with the ``key=value`` pairs beside it added (``command=...
    --json '{"timeout": 2}'``: the pairs for plain values, the JSON for lists and objects).

    Raises:
        UsageError: the JSON is not an object, or names an argument a pair names too.
    """
    if not isinstance(given, dict):
        raise UsageError(
            f"--json is {json_kind_phrase(given)}; with key=value pairs beside it, it must "
            "be an object of named arguments"
        )
    both = [key for key in pairs if key in given]
    if both:
        raise UsageError(f"argument {as_typed(both[0])} is given both as key=value and in --json")
    return {**given, **pairs}


def _find_tool(tools: Sequence[Tool[Any]], name: str) -> Tool[Any]:
    for candidate in tools:
        if candidate.name == name:
            return candidate
    names = ", ".join(t.name for t in tools)
    raise UsageError(f"unknown tool {as_typed(name)}; choose one of: {names}")


def _progress_printer(out: TextIO, before: Callable[[], None]) -> Callable[[ToolUpdate], None]:
    show = for_terminal(out)

    def on_update(update: ToolUpdate) -> None:
        before()
        text = content_text(update.content)
        for line in text.splitlines():
            out.write(f"  │ {show(line)}\n")
        out.flush()

    return on_update


def _events_printer(out: TextIO) -> Callable[[ToolUpdate], None]:
    def on_update(update: ToolUpdate) -> None:
        out.write(ToolUpdateEvent.from_update(update).to_json() + "\n")
        out.flush()

    return on_update


def _one_line(text: str) -> str:
    """``text`` on one line. A pointer line (spaces and a ``^`` under the line above it,
    as an invalid regex's message draws) points at nothing once flattened: the pair
    becomes ``Position N of 'LINE'.``, or ``Pattern: 'LINE'.`` after a message giving N."""
    lines = text.splitlines()
    out: list[str] = []
    for i, line in enumerate(lines):
        pointed = lines[i + 1] if i + 1 < len(lines) else ""
        if line.strip() == "^" and out and i > 0:
            continue  # drawn into the line above
        if pointed.strip() == "^" and line.strip():
            indent = len(line) - len(line.lstrip(" "))
            column = pointed.index("^") - indent
            shown = f"'{line[indent:]}'"
            said = " ".join(out).lower()
            # A message that gives the position already needs only the line it is in.
            given = f"position {column}" in said
            out.append(f"Pattern: {shown}." if given else f"Position {column} of {shown}.")
            continue
        out.append(line.strip())
    return " ".join(part for part in out if part)


def run_call(args: argparse.Namespace, out: TextIO) -> int:
    """The ``call`` subcommand; returns the exit code (0 ok, 1 tool error, 2 usage).

    A result with ``INVALID_ARGUMENTS`` (an invalid regex, say) is a usage error too: with
    ``--events`` its exit code is 2; without, its message goes to stderr as one line.

    Raises:
        UsageError: the tool, the arguments or the workspace root are not usable.
    """
    arguments: Any = parse_key_values(args.pairs)
    if args.json is not None:
        try:
            given = json.loads(args.json)
        except json.JSONDecodeError as exc:
            raise UsageError(f"--json is not valid JSON: {exc}") from exc
        arguments = _with_pairs(given, arguments) if arguments else given
    chosen = _find_tool(_workspace_tools(args.root, sandbox=_sandbox(args)), args.tool)
    call_id = "cli-call"
    if args.events:
        out.write(ToolCallStartEvent(tool_call_id=call_id, tool_name=chosen.name).to_json() + "\n")
        out.write(ToolCallEndEvent(tool_call_id=call_id, arguments=arguments).to_json() + "\n")
    if args.events:
        result = invoke_tool_sync(
            chosen, arguments, call_id=call_id, on_update=_events_printer(out)
        )
        out.write(ToolResultEvent.from_result(result).to_json() + "\n")
        if result.error_code is ErrorCode.INVALID_ARGUMENTS:
            return USAGE_ERROR
        return 0 if not result.is_error else 1
    try:
        validated = validate_arguments(chosen, arguments)
    except ToolError as exc:
        raise UsageError(_one_line(exc.message)) from exc
    show = for_terminal(out)
    row: list[str] = [show(format_presentation(chosen.present(validated), chosen.name))]

    def print_row() -> None:
        # The step row comes first, as a client draws it, then progress, then the outcome;
        # it waits for the first of them so that a usage error (an invalid regex the tool
        # finds) prints no row, as one the argument model finds prints none.
        if row:
            out.write(row.pop() + "\n")
            out.flush()

    on_update = _progress_printer(out, print_row)
    result = invoke_tool_sync(chosen, validated, call_id=call_id, on_update=on_update)
    if result.error_code is ErrorCode.INVALID_ARGUMENTS:
        raise UsageError(_one_line(result.error or ""))
    print_row()
    if result.is_error:
        out.write(show(f"error [{result.error_code}]: {result.error}") + "\n")
        return 1
    out.write(show(result.model_text()) + "\n")
    return 0


def _sandbox_options(args: argparse.Namespace) -> dict[str, Any] | None:
    """The :class:`Sandbox` arguments of ``--sandbox``, ``--deny-read``, ``--allow-read``
    and ``--max-processes``; None without ``--sandbox``.

    A relative PATH is taken from ``--root``, as every path a tool is given; ``~`` is the
    home directory.

    Raises:
        UsageError: ``--deny-read``, ``--allow-read`` or ``--max-processes`` without
            ``--sandbox``; a ``--deny-read`` path that does not exist (there is nothing to
            hide, and a file made there later would not be hidden).
    """
    if not args.sandbox:
        if args.deny_read or args.allow_read or args.max_processes is not None:
            raise UsageError("--deny-read, --allow-read and --max-processes need --sandbox")
        return None

    def absolute(path: str) -> str:
        return os.path.join(os.path.abspath(args.root), os.path.expanduser(path))

    denied = [absolute(p) for p in args.deny_read or []]
    for given, path in zip(args.deny_read or [], denied, strict=True):
        if not os.path.lexists(path):
            raise UsageError(
                f"--deny-read {clipped(given)}: {clipped(path)} does not exist, so there is "
                "nothing to hide "
                "(a relative path is taken from --root)"
            )
    return {
        "read_denied": denied,
        "allow_read": [absolute(p) for p in args.allow_read or []],
        "max_processes": args.max_processes,
    }


def _process_count(text: str) -> int:
    """``--max-processes``'s value: a whole number of at least 1."""
    try:
        count = int(text)
    except ValueError:
        count = 0
    if count < 1:
        raise argparse.ArgumentTypeError(f"expected a whole number of at least 1, got {text!r}")
    return count


def _add_sandbox_arguments(parser: argparse.ArgumentParser, help_text: str) -> None:
    parser.add_argument("--sandbox", action="store_true", help=help_text)
    parser.add_argument(
        "--deny-read",
        action="append",
        metavar="PATH",
        help="with --sandbox, also hide PATH from the call; a relative PATH is taken from "
        "--root (repeatable)",
    )
    parser.add_argument(
        "--allow-read",
        action="append",
        metavar="PATH",
        help="with --sandbox, let the call read PATH although it is a credential path "
        "hidden by default, e.g. ~/.netrc (repeatable)",
    )
    parser.add_argument(
        "--max-processes",
        type=_process_count,
        metavar="N",
        help="with --sandbox, cap the processes of each command or call at N (a fork bomb "
        "stops there); no cap by default",
    )


def _sandbox(args: argparse.Namespace) -> Sandbox | None:
    """The sandbox of ``--sandbox`` (with ``--deny-read``/``--allow-read``); None without.

    Raises:
        UsageError: the flags, or a protection this host cannot give.
    """
    options = _sandbox_options(args)
    try:
        return Sandbox(**options) if options is not None else None
    except (SandboxUnavailable, ValueError) as exc:
        raise UsageError(f"--sandbox: {exc}") from exc


def _workspace_tools(
    root: str | Workspace, read_only: bool = False, sandbox: Sandbox | None = None
) -> list[Tool[Any]]:
    """The tools over ``root``; with ``sandbox``, every call runs in it (its writes are
    confined to the root)."""
    try:
        tools = workspace_tools(root, sandbox=sandbox)
    except NotADirectoryError as exc:
        raise UsageError(clipped(str(exc))) from exc
    return [t for t in tools if t.read_only] if read_only else tools


def _add_server_arguments(parser: argparse.ArgumentParser) -> None:
    """The flags ``mcp`` and ``serve`` share: root, sandbox, read-only, checkpoints, policy."""
    parser.add_argument("--root", default=".", help="workspace root (default: current directory)")
    _add_sandbox_arguments(parser, "run every call in the sandbox")
    parser.add_argument("--read-only", action="store_true", help="serve only read-only tools")
    parser.add_argument(
        "--no-checkpoints",
        action="store_true",
        help="take no checkpoint around writing calls (by default each one records the files "
        "it changed, so they can be undone)",
    )
    parser.add_argument(
        "--undo-tool",
        action="store_true",
        help="also serve an 'undo' tool: the model can undo the last call that changed files "
        "(through the policy like any call)",
    )
    parser.add_argument(
        "--shell",
        action="store_true",
        help="also serve the shell tools: a persistent shell (cd and exports persist) and "
        "background processes (start_process, read_process_output, write_process_stdin, "
        "stop_process, list_processes); all of them end when the server does",
    )
    add_policy_arguments(parser)
    parser.add_argument(
        "--checkpoint-dir",
        metavar="DIR",
        help="keep the checkpoints in DIR (outside the root) after the server exits, for "
        "'workspace-tools checkpoints DIR' and 'workspace-tools restore DIR STEP'",
    )


def _mcp_server(args: argparse.Namespace, owned: contextlib.ExitStack) -> Any:
    """The MCP server of ``mcp`` and ``serve``: the tools over ``--root`` (sandboxed,
    read-only) and, with policy flags, a session whose asks go to the client by elicitation.

    Raises:
        UsageError: a root, sandbox or policy rule that cannot be used.
    """
    from workspace_tools.adapters.mcp import create_server, elicitation_confirm

    if args.shell and args.read_only:
        raise UsageError("--shell runs commands: it cannot be served with --read-only")
    enabled = not args.no_checkpoints and not args.read_only
    for flag, given in (("--undo-tool", args.undo_tool), ("--checkpoint-dir", args.checkpoint_dir)):
        if given and not enabled:
            raise UsageError(f"{flag} needs checkpoints (no --no-checkpoints, no --read-only)")
    try:
        workspace = Workspace(args.root)
    except NotADirectoryError as exc:
        raise UsageError(clipped(str(exc))) from exc
    # Last out: its commands and searchers stop when the server ends.
    owned.callback(workspace.close)
    try:
        checkpoints = (
            Checkpoints(workspace, directory=args.checkpoint_dir, keep=bool(args.checkpoint_dir))
            if enabled
            else None
        )
    except ValueError as exc:  # no place for the store outside the root
        raise UsageError(
            f"{exc} (--checkpoint-dir DIR puts it elsewhere, --no-checkpoints turns them off)"
        ) from exc
    # One workspace for the tools and the session: a restore's files count as seen by edits.
    box = _sandbox(args)
    tools = _workspace_tools(workspace, args.read_only, box)
    shells = None
    if args.shell:
        # Its shell and processes live as long as the server, in the same sandbox.
        shells = owned.enter_context(ShellSession(workspace, sandbox=box))
    instructions = f"Tools confined to the workspace {workspace.root}; paths are relative to it."
    policy = policy_from_arguments(args)  # the flags were checked as they were parsed
    if policy.rules:
        # A policy runs the calls through a session: denials, asks answered by elicitation,
        # reads served from its cache while nothing changed, checkpoints around writes.
        try:
            session = ToolSession(
                tools,
                workspace=workspace,
                policy=policy,
                checkpoints=checkpoints or False,
                shell=shells or False,
            )
        except ValueError as exc:  # a rule that names no served tool or argument
            raise UsageError(str(exc)) from exc
        served = [*session.tools, session.undo_tool()] if args.undo_tool else session.tools
        server = create_server(served, call=session.call, instructions=instructions)
        session.confirm = elicitation_confirm(server)
        return server
    if shells is not None:
        tools = [*tools, *shell_tools(shells)]
    if checkpoints is not None:
        # Without a policy, calls run side by side as before; only writing ones wait for
        # each other, each with its checkpoint.
        calls = CheckpointedCalls(
            checkpoints, protected=functools.partial(sandbox_protected, str(workspace.root), [box])
        )
        served = [*tools, calls.undo_tool] if args.undo_tool else tools
        server = create_server(served, call=calls, instructions=instructions)
    else:
        server = create_server(tools, instructions=instructions)
    return server


def run_mcp(args: argparse.Namespace, out: TextIO) -> int:
    """The ``mcp`` subcommand: serve the tools over stdio until the client disconnects
    (exit code 0) or the user interrupts it (130, as shells report SIGINT)."""
    from workspace_tools.adapters.mcp import serve_stdio

    with contextlib.ExitStack() as owned:
        server = _mcp_server(args, owned)
        try:
            anyio.run(serve_stdio, server)
        except KeyboardInterrupt:
            return 130
    return 0


def _load_checkpoints(directory: str) -> Checkpoints:
    try:
        return Checkpoints.load(directory)
    except (ValueError, NotADirectoryError) as exc:
        raise UsageError(str(exc)) from exc


def run_checkpoints(args: argparse.Namespace, out: TextIO) -> int:
    """The ``checkpoints`` subcommand: the steps recorded in a checkpoint directory and
    the files each changed (``(undone)`` once restored)."""
    checkpoints = _load_checkpoints(args.directory)
    show = for_terminal(out)
    out.write(show(f"workspace {checkpoints.workspace.root}") + "\n")
    for step in checkpoints.steps:
        out.write(f"step {step.step}\n")
        for path, (old, new) in step.changes.items():
            change = "created" if old is None else "deleted" if new is None else "changed"
            undone = " (undone)" if path in step.undone else ""
            out.write(show(f"  {change} {path}{undone}") + "\n")
    return 0


def run_restore(args: argparse.Namespace, out: TextIO) -> int:
    """The ``restore`` subcommand: restore a recorded step (exit 0), or list the conflicts
    that refuse it (exit 1)."""
    checkpoints = _load_checkpoints(args.directory)
    kept = [c.step for c in checkpoints.steps]
    if not any(step >= args.step for step in kept):
        # A typo must not pass for "nothing to restore".
        listed = ", ".join(map(str, kept)) if kept else "none"
        raise UsageError(f"no step {args.step} or later was kept (kept steps: {listed})")
    try:
        result = checkpoints.restore(
            args.step, args.paths or None, dry_run=args.dry_run, overwrite=args.overwrite
        )
    except ToolError as exc:
        if exc.code is ErrorCode.INVALID_ARGUMENTS or exc.code is ErrorCode.OUTSIDE_WORKSPACE:
            raise UsageError(exc.message) from exc
        out.write(for_terminal(out)(f"error [{exc.code}]: {exc.message}") + "\n")
        return 1
    # The model's words are the restore's arguments; here they are the command's.
    text = result.model_text().replace(
        "with overwrite, or leave them out with paths:", "with --overwrite, or name the others:"
    )
    out.write(for_terminal(out)(text) + "\n")
    return 1 if result.conflicts and not (result.applied or result.dry_run) else 0


def run_serve(args: argparse.Namespace, out: TextIO) -> int:
    """The ``serve`` subcommand: the ``mcp`` server over streamable HTTP on ``--http``,
    behind a bearer token (``$WORKSPACE_TOOLS_TOKEN``, else a new one printed). The first
    line of ``out`` is ``serving URL``, then ``token TOKEN`` when it was generated; the
    server runs until SIGINT or SIGTERM (exit code 0).

    Raises:
        UsageError: a bad ``--http`` address, or one that cannot be bound.
    """
    from workspace_tools.adapters.mcp_http import (
        TOKEN_ENV,
        bind,
        mcp_url,
        new_token,
        parse_address,
        serve_http,
    )

    try:
        host, port = parse_address(args.http)
    except ValueError as exc:
        raise UsageError(str(exc)) from exc
    token = os.environ.get(TOKEN_ENV) or None
    with contextlib.ExitStack() as owned:
        server = _mcp_server(args, owned)
        try:
            sock = owned.enter_context(bind(host, port))
        except OSError as exc:
            shown = clipped(args.http, ECHO_LIMIT)
            message = f"--http {shown}: cannot listen there: {exc.strerror or exc}"
            raise UsageError(message) from exc
        out.write(f"serving {mcp_url(sock)}\n")
        if token is None:
            token = new_token()
            out.write(f"token {token}\n")
        out.flush()
        # What is not given keeps serve_http's defaults (the help texts name them).
        limits = {
            "max_sessions": args.max_sessions,
            "session_idle_timeout": args.session_idle_timeout,
        }
        given = {name: value for name, value in limits.items() if value is not None}
        anyio.run(functools.partial(serve_http, **given), server, token, sock)
    return 0


def _positive_int(text: str) -> int:
    """An argparse type: a whole number of at least 1."""
    # isdecimal, not isdigit: int() refuses a superscript digit ('²'), which argparse would
    # then report under this function's name.
    if not text.isdecimal() or int(text) < 1:
        shown = clipped(text, ECHO_LIMIT)
        raise argparse.ArgumentTypeError(f"{shown}: give a whole number, 1 or more")
    return int(text)


def _positive_seconds(text: str) -> float:
    """An argparse type: a positive, finite number of seconds."""
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not (math.isfinite(value) and value > 0):
        raise argparse.ArgumentTypeError(
            f"{clipped(text, ECHO_LIMIT)}: give a finite number of seconds above 0"
        )
    return value


def run_schema(args: argparse.Namespace, out: TextIO) -> int:
    """The ``schema`` subcommand: print the tool definitions for a provider as JSON."""
    from workspace_tools.adapters.export import tool_definitions

    tools = _workspace_tools(args.root, args.read_only)
    out.write(json.dumps(tool_definitions(tools, args.format), indent=2) + "\n")
    return 0


def run_demo(args: argparse.Namespace, out: TextIO) -> int:
    """The ``demo`` subcommand: drive every tool over a copy of a project."""
    if args.root is not None and not os.path.isdir(args.root):
        raise UsageError(f"--root is not a directory: {clipped(args.root)}")
    return play_demo(args.root, out)


_QUOTED = re.compile(r"'([^']*)'")
_LONG_WORD = re.compile(rf"(?<!\S)[^\s']{{{ECHO_LIMIT + 1},}}")


def clip_echoes(message: str) -> str:
    """``message`` (argparse's, which quotes what was typed whole: ``invalid choice: 'x'``)
    with each quoted value over :data:`ECHO_LIMIT` characters cut as :func:`as_typed` cuts
    it, and each other word over it cut to its head and its length (``xxx… (N
    characters)``): a 100 KB argument must not come back whole."""

    def quoted(match: re.Match[str]) -> str:
        return as_typed(match[1])

    def word(match: re.Match[str]) -> str:
        text = match[0]
        return f"{text[:ECHO_LIMIT]}… ({len(text):,} characters)"

    return _LONG_WORD.sub(word, _QUOTED.sub(quoted, message))


class _Parser(argparse.ArgumentParser):
    """Reports a bad command line in one line (no usage dump) with exit code 2; what the
    user typed is echoed clipped (:func:`clip_echoes`)."""

    def error(self, message: str) -> NoReturn:
        self.exit(USAGE_ERROR, f"{self.prog}: error: {clip_echoes(message)}\n")


def build_parser() -> argparse.ArgumentParser:
    """The argument parser of ``workspace-tools``."""
    parser = _Parser(
        prog="workspace-tools", description="File, search and command tools for coding agents."
    )
    parser.add_argument("--version", action="version", version=f"workspace-tools {__version__}")
    sub = parser.add_subparsers(dest="command")
    call = sub.add_parser("call", help="run one tool call and print its result")
    call.add_argument("tool", help="tool name, e.g. read_file")
    call.add_argument("pairs", nargs="*", default=[], metavar="key=value", help="tool arguments")
    call.add_argument(
        "--json", help="tool arguments as one JSON object (key=value pairs may add others)"
    )
    call.add_argument("--root", default=".", help="workspace root (default: current directory)")
    _add_sandbox_arguments(call, "run the call in the sandbox")
    call.add_argument("--events", action="store_true", help="print wire events as JSON lines")
    call.set_defaults(handler=run_call)

    mcp = sub.add_parser("mcp", help="serve the tools to an MCP client over stdio")
    _add_server_arguments(mcp)
    mcp.set_defaults(handler=run_mcp)

    serve = sub.add_parser(
        "serve",
        help="serve the tools to MCP clients over streamable HTTP, behind a bearer token",
    )
    serve.add_argument(
        "--http",
        default="127.0.0.1:8765",
        metavar="HOST:PORT",
        help="where to listen (default 127.0.0.1:8765, this machine only; port 0 picks one). "
        "The token comes from $WORKSPACE_TOOLS_TOKEN, else a new one is printed",
    )
    serve.add_argument(
        "--max-sessions",
        type=_positive_int,
        metavar="N",
        help="most MCP sessions open at once (default 32); a client that would open one more "
        "gets HTTP 503 until a session ends or goes idle",
    )
    serve.add_argument(
        "--session-idle-timeout",
        type=_positive_seconds,
        metavar="SECONDS",
        help="close a session after this long without a request (default 1800)",
    )
    _add_server_arguments(serve)
    serve.set_defaults(handler=run_serve)

    schema = sub.add_parser("schema", help="print the tool definitions as JSON")
    schema.add_argument("--format", choices=SCHEMA_FORMATS, default="mcp", help="whose format")
    schema.add_argument("--root", default=".", help="workspace root (default: current directory)")
    schema.add_argument("--read-only", action="store_true", help="only read-only tools")
    schema.set_defaults(handler=run_schema)

    demo = sub.add_parser("demo", help="drive every tool over a copy of a sample project")
    demo.add_argument("--root", help="copy this directory instead of the sample project")
    demo.set_defaults(handler=run_demo)

    listing = sub.add_parser("checkpoints", help="list the steps kept in a checkpoint directory")
    listing.add_argument("directory", help="the --checkpoint-dir of an MCP server")
    listing.set_defaults(handler=run_checkpoints)

    restore = sub.add_parser(
        "restore",
        help="bring back the files as they were before a step kept in a checkpoint directory",
    )
    restore.add_argument("directory", help="the --checkpoint-dir of an MCP server")
    restore.add_argument("step", type=int, help="the step (see 'workspace-tools checkpoints')")
    restore.add_argument("paths", nargs="*", metavar="PATH", help="only these paths")
    restore.add_argument("--dry-run", action="store_true", help="print the diff; change nothing")
    restore.add_argument(
        "--overwrite", action="store_true", help="also restore files changed since by others"
    )
    restore.set_defaults(handler=run_restore)
    return parser


def _report(exc: Exception) -> None:
    # A tool's message may quote a file name or a pattern from the workspace.
    sys.stderr.write(f"workspace-tools: error: {for_terminal(sys.stderr)(str(exc))}\n")


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``workspace-tools`` console script; returns the exit code."""
    parser = build_parser()
    args, extra = parser.parse_known_args(argv)
    # argparse cannot take positionals after options (``call read_file --root . path=a``);
    # the key=value pairs it left over belong to ``call``.
    pairs = [e for e in extra if args.command == "call" and "=" in e and not e.startswith("-")]
    stray = [e for e in extra if e not in pairs]
    if stray:
        parser.error(f"unrecognized arguments: {' '.join(stray)}")
    if args.command is None:
        # Nothing to run: the usage and the subcommands on stderr, and exit code 2 as for
        # any other command line that cannot run.
        parser.print_help(sys.stderr)
        return USAGE_ERROR
    if pairs:
        args.pairs = [*args.pairs, *pairs]
    try:
        return int(args.handler(args, sys.stdout))
    except UsageError as exc:
        _report(exc)
        return USAGE_ERROR
    except ImportError as exc:  # an adapter whose SDK is not installed says how to install it
        _report(exc)
        return 1
    except BrokenPipeError:
        # The reader left (``workspace-tools demo | head``); say nothing more to it.
        # https://docs.python.org/3/library/signal.html#note-on-sigpipe
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 1


if __name__ == "__main__":
    sys.exit(main())
