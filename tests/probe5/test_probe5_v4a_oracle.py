"""The Responses API's ``apply_patch_call`` run by us and by openai-agents' ``apply_diff``
(the V4A executor of the Agents SDK, 0.24.0): for every patch whose place is defined (its
lines occur once, the file is UTF-8 with one line ending), the resulting bytes are equal.

Where the SDK takes the first of several places, or places a chunk somewhere it did not say,
we refuse with the reason; those and the SDK's known bugs (one line ending for the whole
file, no final newline on created files) are tested as such, each naming the README line
that says we differ."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, replace
from itertools import count
from pathlib import Path
from typing import Any

import anyio
import codex_apply_patch
import pytest
from agents.apply_diff import apply_diff
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from openai.types.responses.response_input_item import ApplyPatchCallOutput

from tests.probe5._oracle import UNPLACED, check_refusal, said_in_readme
from tests.probe5._render import Edit, edits, v4a
from workspace_tools import Tool, workspace_tools
from workspace_tools.adapters.openai_apply_patch import invoke_apply_patch_call

UNCHANGED = "\nNo file was changed: correct the operation and send the apply_patch_call again."


@dataclass(repr=False)
class Files:
    """A directory and our apply_patch over it; each example writes a file of its own name,
    so no example's file is another's stale copy."""

    root: Path
    tool: Tool[Any]
    names: Iterator[int]

    def __repr__(self) -> str:
        return f"Files({self.root})"

    def update(self, data: bytes, diff: str) -> tuple[bytes, dict[str, Any]]:
        """Run an ``update_file`` of a file holding ``data``: its bytes after, and the
        output item (checked against the SDK's type)."""
        return self.run("update_file", data, diff)

    def run(self, kind: str, data: bytes | None, diff: str) -> tuple[bytes, dict[str, Any]]:
        name = f"f{next(self.names)}.txt"
        if data is not None:
            (self.root / name).write_bytes(data)
        operation = {"type": kind, "path": name, "diff": diff}
        item = {"type": "apply_patch_call", "call_id": "c", "operation": operation}
        output = anyio.run(invoke_apply_patch_call, self.tool, item)
        ApplyPatchCallOutput.model_validate(output)
        path = self.root / name
        output["output"] = output["output"].replace(name, "F")
        return (path.read_bytes() if path.exists() else b""), output


@pytest.fixture(scope="module")
def files(tmp_path_factory: pytest.TempPathFactory) -> Files:
    root = tmp_path_factory.mktemp("v4a")
    tool = {t.name: t for t in workspace_tools(root)}["apply_patch"]
    return Files(root, tool, count())


def theirs(data: bytes, diff: str) -> bytes | str:
    """The SDK's result: the new bytes, or its error text."""
    try:
        return apply_diff(data.decode("utf-8"), diff).encode("utf-8")
    except ValueError as exc:
        return str(exc)


@settings(
    max_examples=250,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(edit=edits())
def test_update_file_gives_the_sdks_bytes_where_the_place_is_defined(
    files: Files, edit: Edit
) -> None:
    diff = v4a(edit)
    ours, output = files.update(edit.data, diff)
    reference = theirs(edit.data, diff)
    if output["status"] == "completed":
        summary = "Success. Updated the following files:\nM F"
        assert (ours, output["output"]) == (edit.result, summary)
        assert reference == ours, (diff, reference)
        return
    assert ours == edit.data, "a refused patch changed the file"
    assert output["output"].endswith(UNCHANGED), output
    check_refusal(edit, output["output"])


def mangle(edit: Edit, how: str) -> str:
    """``edit``'s diff with its context and removed lines written loosely, as models do:
    trailing whitespace dropped or added, or leading whitespace dropped."""
    lines = []
    for line in v4a(edit).splitlines():
        kind, text = line[:1], line[1:]
        if kind in " -" and not line.startswith("@@") and text.strip():
            text = {"rstrip": text.rstrip(), "pad": text + " ", "strip": text.strip()}[how]
        lines.append(kind + text if line[:1] in " -+" else line)
    return "\n".join(lines) + "\n"


@settings(
    max_examples=150,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(edit=edits(), how=st.sampled_from(["rstrip", "pad", "strip"]))
def test_loose_passes_run_exact_then_rstrip_then_strip_as_the_sdks(
    files: Files, edit: Edit, how: str
) -> None:
    # Only added lines whose indentation we re-base could differ: none here, since the
    # generated added lines are whole vocabulary lines and re-basing is tested below.
    edit = replace(edit, regions=tuple(replace(r, new=()) for r in edit.regions if r.end > r.start))
    if not edit.regions:
        return
    diff = mangle(edit, how)
    ours, output = files.update(edit.data, diff)
    reference = theirs(edit.data, diff)
    if output["status"] == "completed":
        assert reference == ours, (diff, output, reference)
        return
    assert ours == edit.data
    if isinstance(reference, bytes):
        check_refusal(edit, output["output"])


def test_an_indented_anchor_names_the_indented_line_as_the_sdk_reads_it(files: Files) -> None:
    # `@@     def run():` names the method, not the function of the same name at the top:
    # the anchor is the text after "@@ ", its indentation included.
    data = b"def run():\n    x = 1\n\nclass A:\n    def run():\n        x = 1\n"
    diff = "@@     def run():\n-        x = 1\n+        x = 2\n"
    expected = b"def run():\n    x = 1\n\nclass A:\n    def run():\n        x = 2\n"
    assert theirs(data, diff) == expected
    assert files.update(data, diff)[0] == expected
    data = b"   a\nb\nc\na  \nb\n"
    diff = "@@    a\n-b\n+B\n"
    assert theirs(data, diff) == b"   a\nB\nc\na  \nb\n"
    ours, output = files.update(data, diff)
    assert (ours, output["status"]) == (b"   a\nB\nc\na  \nb\n", "completed"), output


def test_a_bare_at_at_line_with_no_lines_after_it_is_refused_as_the_sdk_does(
    files: Files,
) -> None:
    diff = "-b\n+c\n@@\n"
    assert theirs(b"a\nb\n", diff) == "Nothing in this section - index=3 *** End Patch"
    ours, output = files.update(b"a\nb\n", diff)
    assert ours == b"a\nb\n"
    assert output["output"] == (
        "invalid diff: the chunk of 'F' at diff line 3 has no lines; after its @@ line give "
        "the context (' '), removed ('-') and added ('+') lines"
    )


def test_several_places_the_sdk_takes_the_first_of_we_refuse(files: Files) -> None:
    data = b"a\nb\na\nb\n"
    diff = "@@\n a\n-b\n+B\n"
    assert theirs(data, diff) == b"a\nB\na\nb\n"
    ours, output = files.update(data, diff)
    assert ours == data
    assert output["output"] == (
        "F: chunk 1 (diff line 2) matches 2 places, starting at lines 1, 3; add context lines "
        "or an @@ line (the enclosing function or class) so that it matches one place" + UNCHANGED
    )
    said_in_readme("never the first one taken")


def test_mixed_line_endings_stay_per_line_where_the_sdk_makes_all_crlf(files: Files) -> None:
    data = b"a\r\nb\nc\n"
    diff = "@@\n a\n-b\n+B\n c\n"
    assert theirs(data, diff) == b"a\r\nB\r\nc\r\n"  # its known bug (field notes, 1.7)
    assert files.update(data, diff)[0] == b"a\r\nB\nc\n"
    said_in_readme("each line's ending (an added line takes the ending of the line it replaces")


def test_typographic_punctuation_matches_here_and_not_in_the_sdk(files: Files) -> None:
    data = "say \u201chi\u201d \u2014 ok\nend\n".encode()
    diff = '@@\n-say "hi" - ok\n+say hello\n end\n'
    assert theirs(data, diff) == 'Invalid Context 0:\nsay "hi" - ok\nend'
    ours, output = files.update(data, diff)
    assert ours == b"say hello\nend\n"
    assert output["output"] == (
        "Success. Updated the following files:\nM F (matched with unicode punctuation ignored)"
    )
    said_in_readme("`unicode_punctuation` (typographic dashes, quotes and spaces as ASCII)")


def test_an_anchor_not_in_the_file_is_refused_where_the_sdk_ignores_it(files: Files) -> None:
    data = b"def f():\n    return 1\n"
    diff = "@@ def g():\n-    return 1\n+    return 2\n"
    assert theirs(data, diff) == b"def f():\n    return 2\n"
    ours, output = files.update(data, diff)
    assert ours == data
    assert output["output"] == (
        "F: chunk 1 (diff line 1): its @@ line 'def g():' is not in the file. The most similar "
        "line is 1: 'def f():'" + UNCHANGED
    )
    said_in_readme("an `@@` line that is not there and the most similar line")


def test_an_end_of_file_chunk_not_at_the_end_is_refused_where_the_sdk_moves_it(
    files: Files,
) -> None:
    data = b"a\nb\nc\n"
    diff = "@@\n-a\n+A\n*** End of File\n"
    assert theirs(data, diff) == b"A\nb\nc\n"
    ours, output = files.update(data, diff)
    assert ours == data
    assert output["output"] == (
        "F: chunk 1 (diff line 2): its expected lines (the ' ' and '-' lines) are not in the "
        "file at its end (the chunk is marked '*** End of File'); they are at line 1, not at "
        "its end: leave out '*** End of File'" + UNCHANGED
    )


def test_lines_added_without_a_place_are_refused_where_the_sdk_puts_them_on_top(
    files: Files,
) -> None:
    data = b"a\nb\n"
    assert theirs(data, "+new\n") == b"new\na\nb\n"
    ours, output = files.update(data, "+new\n")
    assert ours == data
    assert UNPLACED in output["output"]
    said_in_readme("never appended at the end")


def test_added_lines_follow_the_files_indentation_when_matched_without_it(
    files: Files,
) -> None:
    # The model indents by four spaces where the file has tabs.
    data = b"def f():\n\tif x:\n\t\treturn 1\n"
    diff = "@@\n     if x:\n-        return 1\n+        return 2\n"
    assert theirs(data, diff) == b"def f():\n\tif x:\n        return 2\n"
    assert files.update(data, diff)[0] == b"def f():\n\tif x:\n\t\treturn 2\n"
    said_in_readme("its added lines are re-indented as `edit_file`'s fallback does")


def test_tabs_for_spaces_past_a_deeper_base_are_re_indented_where_the_sdk_writes_spaces(
    files: Files,
) -> None:
    # The chunk starts at depth 0 where the file's block is one tab deep, and indents by
    # four spaces where the file has a tab: the base and the unit both change.
    data = b"func f() {\n\tif x {\n\t\ty = 1\n\t}\n}\n"
    diff = "@@\n if x {\n-    y = 1\n+    y = 2\n+    z = 3\n }\n"
    assert theirs(data, diff) == b"func f() {\n\tif x {\n    y = 2\n    z = 3\n\t}\n}\n"
    ours, output = files.update(data, diff)
    assert (ours, output["status"]) == (
        b"func f() {\n\tif x {\n\t\ty = 2\n\t\tz = 3\n\t}\n}\n",
        "completed",
    ), output


def test_added_lines_take_the_files_depths_where_the_chunks_unit_differs_and_the_sdk_copies(
    files: Files,
) -> None:
    # The chunk's body is 4 spaces deeper than its `if`; the file's is 2. The added line
    # goes where the file has the line it stands in for; the SDK's copy leaves the `if`
    # without a body.
    data = b"def f():\n    if x:\n      y = 1\n"
    diff = "@@\n if x:\n-    y = 1\n+    y = 2\n"
    assert theirs(data, diff) == b"def f():\n    if x:\n    y = 2\n"
    ours, output = files.update(data, diff)
    assert (ours, output["status"]) == (b"def f():\n    if x:\n      y = 2\n", "completed")


def test_an_added_line_at_a_depth_no_rule_tells_is_refused_where_the_sdk_writes_it(
    files: Files,
) -> None:
    # A new block deeper than any of the chunk's lines, in a file of another unit: where
    # `y = 2` goes in the file cannot be told.
    data = b"def f():\n    if x:\n      y = 1\n"
    diff = "@@\n if x:\n-    y = 1\n+    if z:\n+        y = 2\n"
    assert theirs(data, diff) == b"def f():\n    if x:\n    if z:\n        y = 2\n"
    ours, output = files.update(data, diff)
    assert ours == data
    assert output["output"] == (
        "F: chunk 1 (diff line 2): its expected lines match the file's at line 2 only with "
        "leading whitespace ignored, and not at the same relative depths (its line "
        "'    y = 1' is indented 4 spaces past the chunk's shallowest line, where the file's "
        "line 3 has 2 spaces); its added line '        y = 2' is indented as none of its ' ' "
        "and '-' lines is, so its depth in the file cannot be told. Write the ' ', '-' and "
        "'+' lines with the file's indentation; the file's lines 2-3 are:\n"
        "     2\t    if x:\n     3\t      y = 1" + UNCHANGED
    )


@pytest.mark.parametrize(
    ("diff", "expected"),
    [("+# New\n+text\n", b"# New\ntext\n"), ("+# New\n+text", b"# New\ntext\n"), ("", b"")],
)
def test_create_file_ends_its_last_line_where_the_sdk_leaves_it_open(
    files: Files, diff: str, expected: bytes
) -> None:
    assert apply_diff("", diff, mode="create").encode() == expected.removesuffix(b"\n")
    ours, output = files.run("create_file", None, diff)
    assert (ours, output["status"]) == (expected, "completed"), output
    said_in_readme("`create_file` ends every line it writes with a line break")


@pytest.mark.parametrize(
    ("data", "encoded"),
    [
        ("\ufeffa\nb\n".encode(), "\ufeffa\nB\n".encode()),
        ("é\nb\n".encode("latin-1"), "é\nB\n".encode("latin-1")),
    ],
)
def test_encodings_the_sdk_cannot_read_are_kept(files: Files, data: bytes, encoded: bytes) -> None:
    ours, output = files.update(data, "@@\n-b\n+B\n")
    assert (ours, output["status"]) == (encoded, "completed"), output


CLASSES = (
    b"class A:\n    def f(self):\n        x = 1\n\nclass B:\n    def f(self):\n        x = 1\n"
)


@pytest.mark.parametrize(
    ("diff", "expected"),
    [
        (
            "@@ class A:\n@@     def f(self):\n-        x = 1\n+        x = 2\n",
            CLASSES.replace(b"x = 1", b"x = 2", 1),
        ),
        (
            "@@ class B:\n@@     def f(self):\n-        x = 1\n+        x = 2\n",
            CLASSES[:-2] + b"2\n",
        ),
        (
            "@@ class A:\n@@ def f(self):\n-        x = 1\n+        x = 2\n",
            CLASSES.replace(b"x = 1", b"x = 2", 1),
        ),
    ],
)
def test_stacked_anchors_name_the_method_inside_the_class_the_first_one_names(
    files: Files, diff: str, expected: bytes
) -> None:
    # The SDK takes the first `def f` after `class A:`; so do we, because it is the one in
    # the block `class A:` opens (the one in B is not), not because it comes first.
    assert theirs(CLASSES, diff) == expected
    ours, output = files.update(CLASSES, diff)
    assert (ours, output["status"]) == (expected, "completed"), output
    said_in_readme("stack a `@@ class` line above it")


def test_a_repeated_end_patch_after_the_diff_is_read_as_the_sdk_reads_it(files: Files) -> None:
    diff = "@@\n a\n-b\n+c\n*** End Patch\n"
    assert theirs(b"a\nb\n", diff) == b"a\nc\n"
    ours, output = files.update(b"a\nb\n", diff)
    assert (ours, output["status"]) == (b"a\nc\n", "completed"), output
    said_in_readme("`*** End Patch` repeated")


@st.composite
def classes(draw: st.DrawFn) -> tuple[list[str], int, int, int, int]:
    """A module of classes whose methods share names (``class C0`` … each with methods
    drawn from ``f``, ``g``, ``h``, bodies of repeated lines), and the line to change: its
    class, its method and its index, and the context lines around it."""
    lines: list[str] = []
    places = []
    for c in range(draw(st.integers(1, 3))):
        class_line = len(lines)
        lines.append(f"class C{c}:")
        for name in draw(st.lists(st.sampled_from("fgh"), min_size=1, max_size=3, unique=True)):
            method_line = len(lines)
            lines.append(f"    def {name}(self):")
            for _ in range(draw(st.integers(1, 3))):
                places.append((class_line, method_line, len(lines)))
                lines.append("        " + draw(st.sampled_from(["x = 1", "return x", "pass"])))
        lines.append("")
    class_line, method_line, target = draw(st.sampled_from(places))
    return lines, class_line, method_line, target, draw(st.integers(0, 2))


@settings(
    max_examples=150,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(module=classes())
def test_stacked_class_and_method_lines_place_a_change_as_the_sdk_does(
    files: Files, module: tuple[list[str], int, int, int, int]
) -> None:
    lines, class_line, method_line, target, context = module
    before = lines[max(method_line + 1, target - context) : target]
    after = []
    for line in lines[target + 1 : target + 1 + context]:
        if not line.startswith("        "):
            break  # the context stays inside the method
        after.append(line)
    diff = "\n".join(
        [f"@@ {lines[class_line]}", f"@@ {lines[method_line]}"]
        + [" " + line for line in before]
        + ["-" + lines[target], "+        changed = True"]
        + [" " + line for line in after]
    )
    data = ("\n".join(lines) + "\n").encode()
    expected = (
        "\n".join([*lines[:target], "        changed = True", *lines[target + 1 :]]) + "\n"
    ).encode()
    ours, output = files.update(data, diff + "\n")
    if output["status"] == "completed":
        assert ours == expected == theirs(data, diff), diff
        return
    # Refused only when the lines occur twice inside that method: then neither is named.
    body_end = next(
        (i for i in range(method_line + 1, len(lines)) if not lines[i].startswith("        ")),
        len(lines),
    )
    wanted = [*before, lines[target], *after]
    inside = [
        i
        for i in range(method_line + 1, body_end - len(wanted) + 1)
        if lines[i : i + len(wanted)] == wanted
    ]
    assert len(inside) >= 2 and "matches" in output["output"], (diff, output["output"])


@pytest.mark.parametrize(
    ("data", "diff", "expected"),
    [
        (b"a\nb\n", "@@\n-b\n+c\n\n", b"a\nc\n"),
        (b"a\nb\n", "@@\n a\n-b\n+c\n \n", b"a\nc\n"),
        (b"a\nb\n", "@@\n b\n+c\n \n*** End of File\n", b"a\nb\nc\n"),
    ],
)
def test_a_blank_context_line_after_the_files_last_line_stands_for_its_end(
    files: Files, data: bytes, diff: str, expected: bytes
) -> None:
    # A diff ending with a blank line (or a ' ' line) past the file's last line: the SDK
    # matches it with the end of the text, Codex's engine drops it and retries.
    assert codex_update(data, diff) == expected
    if not diff.endswith("*** End of File\n"):
        assert theirs(data, diff) == expected
    ours, output = files.update(data, diff)
    assert (ours, output["status"]) == (expected, "completed"), output
    said_in_readme("blank context lines after the file's last line")


def test_a_blank_context_line_that_is_not_at_the_end_still_has_to_match(files: Files) -> None:
    data, diff = b"a\nb\nc\n", "@@\n a\n-b\n+B\n \n"
    assert isinstance(theirs(data, diff), str)
    ours, output = files.update(data, diff)
    assert (ours, output["status"]) == (data, "failed"), output


def codex_update(data: bytes, diff: str) -> bytes | None:
    """Codex's engine (the codex-apply-patch port) on one file's update."""
    patch = f"*** Begin Patch\n*** Update File: f.txt\n{diff}*** End Patch\n"
    try:
        files = codex_apply_patch.apply_patch_in_memory(patch, {"f.txt": data.decode()}).files
    except RuntimeError:
        return None
    return files["f.txt"].encode()


REJECTED_BY_THE_SDK = {
    "line of no kind": "@@\n a\nxb\n",
    "a *** line": "@@\n a\n*** junk\n",
    "a bare *** line": " a\n-b\n+c\n***\n",
    "@@ with no lines": "@@\n",
    "a last @@ with no lines": "-b\n+c\n@@\n",
    "stacked @@ line not in the file": "@@ a\n@@ zz\n-b\n+c\n",
    "chunks out of order": "@@\n-b\n+B\n@@\n-a\n+A\n",
    "expected lines not in the file": "@@\n a\n\n-b\n",
}


@pytest.mark.parametrize("diff", REJECTED_BY_THE_SDK.values(), ids=REJECTED_BY_THE_SDK.keys())
def test_diffs_the_sdk_rejects_we_reject(files: Files, diff: str) -> None:
    assert isinstance(theirs(b"a\nb\n", diff), str)
    ours, output = files.update(b"a\nb\n", diff)
    assert (ours, output["status"]) == (b"a\nb\n", "failed"), output
