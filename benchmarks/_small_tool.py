"""The small custom tool of ``bench_run.py``, in a module of its own: its ``execute``
pickles by import (by reference); the same tool declared stateless (its calls may share
one long-lived confined process in a sandbox); and the same tool made by a function, whose
``execute`` is a closure (it pickles by value)."""

from __future__ import annotations

from pydantic import BaseModel

from workspace_tools import Tool, tool


class HeadArgs(BaseModel):
    path: str


def head(args: HeadArgs, context: object) -> str:
    with open(args.path, encoding="utf-8") as f:
        return "".join(f.readline() for _ in range(20))


HEAD_TOOL = tool(name="head", description="First 20 lines", parameters=HeadArgs, execute=head)
#: ``head`` keeps nothing between calls: declared so, the public way.
STATELESS_HEAD_TOOL = tool(
    name="head", description="First 20 lines", parameters=HeadArgs, execute=head, stateless=True
)


def closure_head_tool(lines: int = 20) -> Tool[HeadArgs]:
    """The same tool with its ``execute`` a closure (over ``lines``): it crosses to a
    sandbox's worker by value."""

    def execute(args: HeadArgs, context: object) -> str:
        with open(args.path, encoding="utf-8") as f:
            return "".join(f.readline() for _ in range(lines))

    return tool(name="head", description="First lines", parameters=HeadArgs, execute=execute)
