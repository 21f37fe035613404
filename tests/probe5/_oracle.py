"""What the differential tests share: the README's word for each deliberate difference, and
the check that a refusal of a patch an oracle applies is one of them, and true."""

from __future__ import annotations

import re
from pathlib import Path

from tests.probe5._render import Edit, chunks, occurrences, old_lines

README = (Path(__file__).resolve().parents[2] / "README.md").read_text(encoding="utf-8")


def said_in_readme(*phrases: str) -> None:
    """The README says so (the line a deliberate difference rests on)."""
    text = " ".join(README.split())
    for phrase in phrases:
        assert phrase in text, phrase


AMBIGUOUS = re.compile(r"chunk (\d+) \((?:diff|patch) line \d+\) matches (\d+) places")
UNPLACED = "only adds lines and does not say where"
ANCHOR_REPEATED = re.compile(
    r"chunk (\d+) \((?:diff|patch) line \d+\) only adds lines, right after"
)


def check_refusal(edit: Edit, output: str) -> None:
    """Our refusal of a patch the SDK applies is one of the deliberate ones, and true."""
    body_of = chunks(edit)
    ambiguous = AMBIGUOUS.search(output)
    if ambiguous:
        number, places = int(ambiguous.group(1)), int(ambiguous.group(2))
        wanted = old_lines(body_of[number - 1][1])
        # The lines named occur that often after the previous chunk, so none is "the" one.
        assert len(occurrences(edit.lines, wanted)) >= places >= 2, output
        said_in_readme("the match must be unique (`AMBIGUOUS_MATCH` naming the lines, never")
        return
    if UNPLACED in output:
        number = int(re.search(r"chunk (\d+)", output).group(1))  # type: ignore[union-attr]
        anchor, body, eof, _ = body_of[number - 1]
        assert anchor is None and not old_lines(body) and not eof, output
        said_in_readme("without one (and without `*** End of File`) it is refused")
        return
    repeated = ANCHOR_REPEATED.search(output)
    if repeated:
        anchor, body, _, _ = body_of[int(repeated.group(1)) - 1]
        assert anchor is not None and not old_lines(body), output
        assert len(occurrences(edit.lines, [anchor])) >= 2, output
        said_in_readme("A chunk of only `+` lines goes right after its `@@` line, which must")
        return
    raise AssertionError(f"refused a patch whose place is defined: {output}")
