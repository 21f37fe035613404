"""Guard for tests that need the seven tools working, built while they were still stubs.

Each tool's ``execute`` raises NotImplementedError until its implementation lands; the
guard skips only in that case, so once the tools exist these tests run and can fail.
"""

from __future__ import annotations

import inspect
import tempfile

import anyio
import pytest

from workspace_tools import TOOL_NAMES, ToolContext, workspace_tools


def _is_stub(name: str) -> bool:
    with tempfile.TemporaryDirectory() as root:
        chosen = next(t for t in workspace_tools(root) if t.name == name)
        fields = chosen.parameters.model_fields
        args = chosen.parameters.model_construct(
            **{k: "x" for k, f in fields.items() if f.is_required()}
        )
        context = ToolContext("probe", name)
        try:
            if inspect.iscoroutinefunction(chosen.execute):
                anyio.run(chosen.execute, args, context)
            else:
                chosen.execute(args, context)
        except NotImplementedError:
            return True
        except Exception:
            return False
        return False


STUBBED = sorted(name for name in TOOL_NAMES if _is_stub(name))


def needs_tools(*names: str) -> pytest.MarkDecorator:
    """Skip while any of the named tools (all seven when none is named) is still a stub."""
    missing = [n for n in STUBBED if n in (names or TOOL_NAMES)]
    return pytest.mark.skipif(
        bool(missing), reason=f"tools not implemented in this build: {', '.join(missing)}"
    )
