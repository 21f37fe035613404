"""A confirmation callback that answers with anything but a Confirmation or a bool
declines the call (fail closed), with a reason naming what it returned; nothing runs."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from workspace_tools import ErrorCode, Policy, PolicyRule, ToolSession

ASK = Policy(rules=(PolicyRule(name="ask writes", decision="ask", read_only=False),))


async def _async_none(request: Any) -> None:
    return None


@pytest.mark.parametrize(
    ("callback", "returned"),
    [
        (lambda request: "yes", "str"),
        (lambda request: None, "NoneType"),
        (lambda request: 1, "int"),
        (lambda request: {"approved": True}, "dict"),
        (_async_none, "NoneType"),
    ],
)
def test_an_answer_that_is_not_a_confirmation_declines(
    tmp_path: Path, callback: Any, returned: str
) -> None:
    session = ToolSession(tmp_path, policy=ASK, confirm=callback)
    result = session.call_sync("write_file", {"path": "a.txt", "content": "x"})
    assert (result.error_code, result.error) == (
        ErrorCode.PERMISSION_DENIED,
        "Not run: the user declined this write_file call: the confirmation callback "
        f"returned {returned}, not a Confirmation or a bool",
    )
    step = session.steps[-1]
    assert (step.skipped, step.skip_reason, step.denied_by) == (True, "confirmation", "ask writes")
    assert not (tmp_path / "a.txt").exists()
