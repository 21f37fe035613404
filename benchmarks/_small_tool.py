"""The small custom tool of ``bench_run.py``, in a module of its own: its ``execute``
pickles by import, so a sandbox's worker forked by the spawn server can serve it."""

from __future__ import annotations

from pydantic import BaseModel

from workspace_tools import tool


class HeadArgs(BaseModel):
    path: str


def head(args: HeadArgs, context: object) -> str:
    with open(args.path, encoding="utf-8") as f:
        return "".join(f.readline() for _ in range(20))


HEAD_TOOL = tool(name="head", description="First 20 lines", parameters=HeadArgs, execute=head)
