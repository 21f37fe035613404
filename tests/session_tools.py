"""Small tools that behave like the workspace tools, so session tests do not depend on them;
the reading ones declare their cache keys as the workspace tools do."""

from __future__ import annotations

import os
import subprocess
from typing import Any

from pydantic import BaseModel, Field

from workspace_tools import ErrorCode, Tool, ToolContext, ToolError, ToolPresentation, tool
from workspace_tools.workspace import Workspace
from workspace_tools.workspace._fingerprint import file_fingerprint, tree_fingerprint


class ReadArgs(BaseModel):
    path: str
    offset: int = Field(1, ge=1)
    limit: int | None = Field(None, ge=1)


class WriteArgs(BaseModel):
    path: str
    content: str


class EditArgs(BaseModel):
    path: str
    old_text: str
    new_text: str


class ListArgs(BaseModel):
    path: str = "."
    recursive: bool = False


class CommandArgs(BaseModel):
    command: str


def session_tools(workspace: Workspace, runs: list[str] | None = None) -> list[Tool[Any]]:
    """read_file, write_file, edit_file, list_files and run_command over ``workspace``;
    each execution appends the tool name to ``runs``."""
    ran = runs if runs is not None else []

    def read(args: ReadArgs, context: ToolContext) -> str:
        ran.append("read_file")
        real = workspace.resolve(args.path).real
        if not real.is_file():
            raise ToolError(f"File not found: {args.path}", ErrorCode.NOT_FOUND)
        lines = real.read_text(encoding="utf-8").splitlines()
        end = len(lines) if args.limit is None else args.offset - 1 + args.limit
        window = lines[args.offset - 1 : end]
        return "".join(f"{args.offset + i}\t{line}\n" for i, line in enumerate(window))

    def write(args: WriteArgs, context: ToolContext) -> dict[str, Any]:
        ran.append("write_file")
        real = workspace.resolve(args.path).real
        created = not real.exists()
        real.parent.mkdir(parents=True, exist_ok=True)
        temp = real.with_name(real.name + ".tmp")
        temp.write_text(args.content, encoding="utf-8")
        os.replace(temp, real)
        return {"path": args.path, "created": created}

    def edit(args: EditArgs, context: ToolContext) -> dict[str, Any]:
        ran.append("edit_file")
        real = workspace.resolve(args.path).real
        text = real.read_text(encoding="utf-8")
        count = text.count(args.old_text)
        if count == 0:
            raise ToolError(f"No match for old_text in {args.path}", ErrorCode.NO_MATCH)
        real.write_text(text.replace(args.old_text, args.new_text), encoding="utf-8")
        return {"path": args.path, "replacements": count}

    def list_files(args: ListArgs, context: ToolContext) -> str:
        ran.append("list_files")
        top = workspace.resolve(args.path).real
        found = top.rglob("*") if args.recursive else top.iterdir()
        names = sorted(workspace.rel(p) for p in found if ".git" not in p.parts)
        return "\n".join(names)

    def run(args: CommandArgs, context: ToolContext) -> dict[str, Any]:
        ran.append("run_command")
        done = subprocess.run(
            ["bash", "-c", args.command],
            cwd=workspace.root,
            capture_output=True,
            text=True,
            stdin=subprocess.DEVNULL,
        )
        return {"exit_code": done.returncode, "stdout": done.stdout, "stderr": done.stderr}

    def present(label: str, icon: str, field: str) -> Any:
        return lambda a: ToolPresentation(label=label, icon=icon, detail=getattr(a, field))

    return [
        tool(
            name="read_file",
            description="Read a file.",
            parameters=ReadArgs,
            execute=read,
            presentation=present("Read file", "file-text", "path"),
            read_only=True,
            cache_key=lambda a: file_fingerprint(workspace, a.path),
        ),
        tool(
            name="write_file",
            description="Write a file.",
            parameters=WriteArgs,
            execute=write,
            presentation=present("Write file", "file-plus", "path"),
        ),
        tool(
            name="edit_file",
            description="Edit a file.",
            parameters=EditArgs,
            execute=edit,
            presentation=present("Edit file", "file-pen", "path"),
        ),
        tool(
            name="list_files",
            description="List files.",
            parameters=ListArgs,
            execute=list_files,
            presentation=present("List files", "folder", "path"),
            read_only=True,
            cache_key=lambda a: tree_fingerprint(workspace, a.path, a.recursive),
        ),
        tool(
            name="run_command",
            description="Run a command.",
            parameters=CommandArgs,
            execute=run,
            presentation=present("Run command", "terminal", "command"),
        ),
    ]
