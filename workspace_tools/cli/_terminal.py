"""Tool text as a terminal shows it: the step row of a call, with control characters made
visible. Shared by the command line and the demo, which both print steps."""

from __future__ import annotations

from collections.abc import Callable
from typing import TextIO

from workspace_tools._output import ToolPresentation


def _caret(code: int) -> str:
    return "^?" if code == 0x7F else "^" + chr(code + 0x40)


# What a terminal would act on instead of showing: C0 controls but newline and tab (ESC
# starts the sequences that retitle or clear it), DEL, C1 controls, and the bidirectional
# overrides and isolates that reorder what is shown ("Trojan Source", CVE-2021-42574).
_VISIBLE = str.maketrans(
    {
        **{code: _caret(code) for code in [*range(0x20), 0x7F] if code not in (0x09, 0x0A)},
        **{
            code: f"<U+{code:04X}>"
            for code in [*range(0x80, 0xA0), *range(0x202A, 0x202F), *range(0x2066, 0x206A)]
        },
    }
)


def visible_controls(text: str) -> str:
    """``text`` with what a terminal would act on made visible, as ``less`` shows it: C0
    controls in caret notation (ESC is ``^[``, CR ``^M``; newline and tab stay), DEL as
    ``^?``, C1 controls and bidirectional overrides/isolates as ``<U+0085>``."""
    return text.translate(_VISIBLE)


def for_terminal(out: TextIO) -> Callable[[str], str]:
    """How to show tool text on ``out``: :func:`visible_controls` when it is a terminal, the
    text unchanged otherwise (a file or a pipe gets the bytes the tool gave)."""
    return visible_controls if out.isatty() else str


def format_presentation(presentation: ToolPresentation | None, fallback: str) -> str:
    """One step row: ``● Read file [file-text] README.md``; ``● {fallback}`` without a
    presentation."""
    if presentation is None:
        return f"● {fallback}"
    icon = f" [{presentation.icon}]" if presentation.icon else ""
    detail = f" {presentation.detail}" if presentation.detail else ""
    return f"● {presentation.label}{icon}{detail}"
