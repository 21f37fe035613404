"""A UTF-8 file's exact edit made on its bytes gives exactly what the text path gives.

The text path (``replace_text`` on the whole decoded text, ``unified_diff`` of the whole
texts) is the oracle: for generated texts (ASCII, or with two- and three-byte characters)
of mixed line endings, repeated and indented lines, and ``old_text`` cut from them (as it
is, with its endings or indentation changed, or made up), the window's edit, spliced back,
is the whole text's edit; its diff is the whole diff; the line counts it carries are true.
Through ``edit_file``, a workspace whose byte path is switched off is the oracle for
everything a call returns and writes.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.file_support import assert_diff_reproduces, call, tools
from tests.workspace.test_line_counts import _small_steps
from workspace_tools import Workspace
from workspace_tools._errors import ToolError
from workspace_tools.adapters import anthropic_text_editor
from workspace_tools.adapters.anthropic_text_editor import text_editor_tool
from workspace_tools.text._decode import dominant_newline
from workspace_tools.text._diff import diff_fits_window, unified_diff
from workspace_tools.text._line_counts import LineCounts
from workspace_tools.text._match import EditResult, replace_text
from workspace_tools.text._spans import Span, compose
from workspace_tools.text._window_edit import Replacement, replace_in_window
from workspace_tools.tools import edit_file
from workspace_tools.workspace import _state, _textfile

ALPHABETS = st.sampled_from([" \tab=:", " \tab=:\u00e9\u65e5"])
ENDING = st.sampled_from(["\n", "\n", "\n", "\r\n", "\r"])
NEW_TEXT = st.text(alphabet="ab \t\n\r\u00e9", max_size=10)
NEW = NEW_TEXT | st.just("a\ud800")


@st.composite
def texts(draw: st.DrawFn) -> str:
    """Lines (ASCII, or with é and 日), LF, CRLF or a lone CR each, the last one maybe
    unterminated; half of them numbered, half with a run of one line repeated."""
    line = st.text(alphabet=draw(ALPHABETS), max_size=7)
    lines = draw(st.lists(st.tuples(line, ENDING), max_size=24))
    if draw(st.booleans()):  # lines told apart by a number, so that more cuts are unique
        lines = [(f"{n}{line}", ending) for n, (line, ending) in enumerate(lines)]
    if draw(st.booleans()):  # a run of one line, across which a change can slide
        at = draw(st.integers(0, len(lines)))
        lines[at:at] = [(draw(line), draw(ENDING))] * draw(st.integers(4, 12))
    return "".join(line + ending for line, ending in lines) + draw(st.just("") | line)


CUTS = ("as is", "as is", "lines", "lf", "dedented", "made up")


def _cut(draw: st.DrawFn, text: str, ways: tuple[str, ...] = CUTS) -> str:
    """An ``old_text`` cut from ``text``: as it is, or as a model may copy it, or made up."""
    start = draw(st.integers(0, len(text)))
    old = text[start : draw(st.integers(start, len(text)))]
    how = draw(st.sampled_from(ways))
    if how == "lines":  # whole lines, as a model copies them
        lines = text.splitlines(keepends=True)
        first = draw(st.integers(0, max(0, len(lines) - 1)))
        old = "".join(lines[first : first + draw(st.integers(1, 3))])
    elif how == "lf":
        old = old.replace("\r\n", "\n")
    elif how == "dedented":
        old = "\n".join(line.lstrip(" \t") for line in old.split("\n"))
    elif how == "made up":
        old = draw(st.text(alphabet="ab=\n\u00e9\u65e5", min_size=1, max_size=6))
    return old or draw(st.sampled_from(["a", "b\n", "=", "\u00e9"]))


@st.composite
def edits(draw: st.DrawFn) -> tuple[str, str, str, bool]:
    """A text, an ``old_text`` cut from it, a new text and ``replace_all``."""
    text = draw(texts())
    return text, _cut(draw, text), draw(NEW), draw(st.booleans())


@st.composite
def edit_lists(draw: st.DrawFn) -> tuple[str, list[Replacement]]:
    """A text and one to three edits, each ``old_text`` cut from the text the edits before
    it leave (while they succeed)."""
    text = draw(texts())
    newline = dominant_newline(text) or "\n"
    now = text
    made: list[Replacement] = []
    for _ in range(draw(st.integers(1, 3))):
        # Mostly whole lines and no lone surrogate, so that most lists are made; deletions.
        old = _cut(draw, now, ("lines", "lines", "lines", *CUTS))
        pick = draw(st.integers(0, 4))
        new = draw(NEW) if pick == 0 else "" if pick == 1 else draw(NEW_TEXT)
        edit = Replacement(old, new, draw(st.booleans()))
        made.append(edit)
        try:
            now = replace_text(
                now, edit.old, edit.new, replace_all=edit.replace_all, newline=newline, path="f"
            ).text
        except ToolError:
            break
    return text, made


def _whole(text: str, made: list[Replacement], newline: str) -> tuple[str, list[EditResult], str]:
    """The edits made in turn on the whole text: the text, each result, the diff."""
    results = []
    now = text
    spans: list[Span] = []
    for edit in made:
        result = replace_text(
            now, edit.old, edit.new, replace_all=edit.replace_all, newline=newline, path="f"
        )
        now = result.text
        spans = compose(spans, result.spans)
        results.append(result)
    return now, results, unified_diff(text, now, "f", spans=spans).diff


@settings(max_examples=1500, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(case=edit_lists())
def test_edits_made_in_their_window_are_the_whole_texts_edits(
    case: tuple[str, list[Replacement]],
) -> None:
    text, made = case
    newline = dominant_newline(text) or "\n"
    data = text.encode()
    window = replace_in_window(data, made, newline=newline, path="f")
    try:
        final, results, diff = _whole(text, made, newline)
    except (ToolError, UnicodeEncodeError):
        assert window is None  # what the text path refuses, the window never makes
        return
    if window is None:
        return  # the text path makes it
    assert window.old == data[window.start : window.stop].decode()
    before, after = data[: window.start].decode(), data[window.stop :].decode()
    assert before + window.new + after == final
    assert [(r.replacements, r.match) for r in window.results] == [
        (r.replacements, r.match) for r in results
    ]
    assert window.unchanged == (
        min(r.unchanged[0] for r in results) - len(before),
        min(r.unchanged[1] for r in results) - len(after),
    )
    assert (
        unified_diff(
            window.old,
            window.new,
            "f",
            spans=window.spans,
            lines_above=data.count(b"\n", 0, window.start),
        ).diff
        == diff
    )
    if not text.isascii():
        return  # counts are carried for an ASCII text only (of characters, its bytes)
    with _small_steps():
        counts = LineCounts()
        counts.before(text, len(text))  # counts known all along the old text
        carried = counts.changed(window.old, window.new, window.unchanged, at=window.start)
        for at, count in carried._known:
            assert count == final.count("\n", 0, at), (at, carried._known)


@settings(max_examples=600, deadline=None)
@given(
    lines=st.lists(st.text(alphabet=" \tab\u00e9", max_size=5), min_size=1, max_size=10),
    data=st.data(),
)
def test_an_edit_of_a_crlf_text_keeps_every_break_whole(lines: list[str], data: Any) -> None:
    """An ``old_text`` as a model copies it from a CRLF file (LF breaks), starting or
    ending anywhere, and a ``new_text`` with LF breaks: the edit, on the whole text and on
    the bytes, writes CRLF breaks only, never a lone CR or a bare LF."""
    text = "".join(line + "\r\n" for line in lines)
    copied = text.replace("\r\n", "\n")
    start = data.draw(st.integers(0, len(copied) - 1))
    old = copied[start : data.draw(st.integers(start + 1, len(copied)))]
    new = data.draw(st.text(alphabet="ab\n", max_size=6))
    replace_all = data.draw(st.booleans())
    try:
        result = replace_text(text, old, new, replace_all=replace_all, newline="\r\n", path="f")
    except ToolError:
        return  # nowhere or ambiguous (the table tests pin those)
    assert result.text.replace("\r\n", "").count("\n") == 0, (text, old, new, result.text)
    assert result.text.replace("\r\n", "").count("\r") == 0, (text, old, new, result.text)
    window = replace_in_window(
        text.encode(), [Replacement(old, new, replace_all)], newline="\r\n", path="f"
    )
    if window is not None:
        spliced = text.encode()[: window.start] + window.new.encode()
        assert spliced + text.encode()[window.stop :] == result.text.encode()


@pytest.mark.parametrize(
    ("text", "old", "why"),
    [
        ("a\nb\n", "c", "nowhere"),
        ("a\nb\na\n", "a\n", "in two places"),
        ("foo\nfoo\nfoo\n", "foo\nfoo\n", "in two overlapping places"),
        (
            "x\n" + "a\n" * 5 + "x\n" + "a\n" * 5 + "x\n",
            "x\n" + "a\n" * 5 + "x\n",
            "in two places that share a line",
        ),
        ("    x = 1\n", "x  = 1", "matched by a fallback only"),
        ("a\n", "\u00e9", "a character the text lacks"),
        ("a\n", "a\ud800", "a lone surrogate, which no text holds"),
    ],
)
def test_an_edit_the_window_cannot_make_is_left_to_the_text_path(
    text: str, old: str, why: str
) -> None:
    assert (
        replace_in_window(text.encode(), [Replacement(old, "z")], newline="\n", path="f") is None
    ), why


@pytest.mark.parametrize(
    ("first", "second", "why"),
    [
        (Replacement("b = 1", "a = 1"), "a = 1", "the first edit makes a second place"),
        (Replacement("x = 1", "x = 2"), "2\ny", "a place across the first edit's end"),
        (Replacement("y = 2", "y = 3"), "= 1\ny =", "a place across the window's start"),
        (Replacement("x = 1\n", ""), "9\ny", "a place where the first edit removed a line"),
        (Replacement("y = 2", "y = 3"), "foo\nfoo\n", "two overlapping places before it"),
        (Replacement("y = 2", "y = 3"), "z = 1", "an indented line far before it"),
        (Replacement("a = 1", "a = 3"), "foo\na", "a place across the window's start"),
        (Replacement("x = 1", "x = 2"), "\ny = 2", "a place starting where the window ends"),
        (Replacement("b = 1", "b = 2"), "a = 1\n", "a place ending where the window starts"),
    ],
)
def test_a_later_edit_is_searched_for_in_the_text_the_edits_before_it_leave(
    first: Replacement, second: str, why: str
) -> None:
    text = (
        "foo\nfoo\nfoo\na = 1\nb = 1\n"
        + "".join(f"w = {i}\n" for i in range(20))
        + "    z = 1\n"
        + "".join(f"v = {i}\n" for i in range(20))
        + "x = 1\ny = 2\n"
    )
    made = [first, Replacement(second, "Z\nq")]
    window = replace_in_window(text.encode(), made, newline="\n", path="f")
    try:
        final, _, _ = _whole(text, made, "\n")
    except ToolError:
        assert window is None, why
        return
    assert window is not None, why
    data = text.encode()
    assert data[: window.start].decode() + window.new + data[window.stop :].decode() == final, why


def test_a_window_holds_the_edits_and_one_line_more_than_the_diffs_context() -> None:
    text = "".join(f"line {i}\n" for i in range(40))
    window = replace_in_window(
        text.encode(), [Replacement("line 10\nline 11\n", "x\n")], newline="\n", path="f"
    )
    assert window is not None
    assert (window.start, window.stop) == (text.index("line 6\n"), text.index("line 16\n"))
    assert window.new == window.old.replace("line 10\nline 11\n", "x\n")
    # A later edit further on: the window holds the lines between them too.
    window = replace_in_window(
        text.encode(),
        [Replacement("line 10\n", "x\n"), Replacement("line 30\n", "y\n")],
        newline="\n",
        path="f",
    )
    assert window is not None
    assert (window.start, window.stop) == (text.index("line 6\n"), text.index("line 35\n"))
    assert window.results[0].replacements == window.results[1].replacements == 1


def _outcome(result: Any) -> Any:
    if result.error is not None:
        return (result.error_code, result.error)
    return (result.content, result.details.model_dump())


@pytest.fixture(params=[True, False], ids=["kept_whole", "known_by_hash"])
def kept_whole(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> bool:
    if not request.param:  # as a file over 8 MiB: written in pieces, known by its hash
        monkeypatch.setattr(_state, "KEPT_FILE_BYTES", 64)
    return bool(request.param)


def _editor(workspace: Workspace, how: str) -> Any:
    """A caller of ``edit_file``, or of the text editor's ``str_replace``, over ``workspace``."""
    if how == "edit_file":
        edit = tools(workspace)["edit_file"]
        return lambda old, new, replace_all=False: call(
            edit, path="f.txt", old_text=old, new_text=new, replace_all=replace_all
        )
    editor = text_editor_tool(workspace)
    return lambda old, new, replace_all=False: call(
        editor, command="str_replace", path="f.txt", old_str=old, new_str=new
    )


@pytest.mark.parametrize("how", ["edit_file", "str_replace"])
@settings(
    max_examples=100,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)
@given(first=edits(), second_new=NEW)
def test_an_edit_on_bytes_returns_and_writes_what_the_text_path_does(
    tmp_path_factory: pytest.TempPathFactory,
    kept_whole: bool,
    how: str,
    first: tuple[str, str, str, bool],
    second_new: str,
) -> None:
    text, old, new, replace_all = first
    base = tmp_path_factory.mktemp("pair")
    outcomes = []
    for byte_path in (True, False):
        root = base / str(byte_path)
        root.mkdir()
        (root / "f.txt").write_bytes(text.encode())
        edit = _editor(Workspace(root, fsync=False), how)
        with pytest.MonkeyPatch.context() as patch:
            if not byte_path:
                for module in (edit_file, anthropic_text_editor):
                    patch.setattr(module, "edit_bytes", lambda *a, **k: None)
            seen = [_outcome(edit(old, new, replace_all and how == "edit_file"))]
            # A second edit of what the first wrote: numbered from the counts it kept.
            lines = (root / "f.txt").read_bytes().decode("utf-8", "replace").split("\n")
            middle = lines[len(lines) // 2] + "\n" if len(lines) > 1 else lines[0] or "a"
            seen.append(_outcome(edit(middle, second_new)))
        seen.append((root / "f.txt").read_bytes())
        outcomes.append(seen)
    assert outcomes[0] == outcomes[1]


@settings(
    max_examples=150,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)
@given(case=edit_lists())
def test_an_edits_list_on_bytes_returns_and_writes_what_the_text_path_does(
    tmp_path_factory: pytest.TempPathFactory,
    kept_whole: bool,
    case: tuple[str, list[Replacement]],
) -> None:
    text, made = case
    listed = [{"old_text": e.old, "new_text": e.new, "replace_all": e.replace_all} for e in made]
    base = tmp_path_factory.mktemp("list")
    outcomes = []
    for byte_path in (True, False):
        root = base / str(byte_path)
        root.mkdir()
        (root / "f.txt").write_bytes(text.encode())
        edit = tools(Workspace(root, fsync=False))["edit_file"]
        with pytest.MonkeyPatch.context() as patch:
            if not byte_path:
                patch.setattr(edit_file, "edit_bytes", lambda *a, **k: None)
            outcome = _outcome(call(edit, path="f.txt", edits=listed))
        outcomes.append((outcome, (root / "f.txt").read_bytes()))
    assert outcomes[0] == outcomes[1]


@pytest.mark.parametrize("how", ["edit_file", "str_replace"])
def test_a_utf8_files_exact_edit_is_never_decoded_for_its_text(
    tmp_path: Path, kept_whole: bool, how: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    old = b"".join(b"line %d\n" % i for i in range(2_000))
    (tmp_path / "f.txt").write_bytes(old)

    def no_decode(*args: object) -> None:
        raise AssertionError("the whole file was decoded")

    monkeypatch.setattr(_textfile, "decode_text", no_decode)
    edit = _editor(Workspace(tmp_path), how)
    # The second edit finds the file UTF-8 beyond ASCII: still on its bytes, its lines
    # counted there.
    steps = [("line 1000\n", "caf\u00e9\n", 998), ("line 1500\n", "\u65e5\n", 1498)]
    for before, after, hunk in steps:
        result = edit(before, after)
        assert result.error is None, result.error
        new = old.replace(before.encode(), after.encode())
        assert (tmp_path / "f.txt").read_bytes() == new
        assert result.details.diff.splitlines()[3] == f"@@ -{hunk},7 +{hunk},7 @@"
        assert_diff_reproduces(tmp_path / "scratch", "f.txt", old, new, result.details)
        old = new


@pytest.mark.parametrize("how", ["edit_file", "str_replace"])
def test_a_file_in_another_encoding_is_edited_on_its_text(
    tmp_path: Path, how: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # latin-1 (not strict UTF-8) and a UTF-8 BOM: decoded whole, as the text path reads them.
    decoded: list[str] = []
    real_decode = _textfile.decode_text

    def counting(data: bytes, name: str | None = None) -> Any:
        decoded.append(name or "")
        return real_decode(data, name)

    monkeypatch.setattr(_textfile, "decode_text", counting)
    for raw in (b"caf\xe9 = 1\nx = 2\n", b"\xef\xbb\xbfcaf\xc3\xa9 = 1\nx = 2\n"):
        (tmp_path / "f.txt").write_bytes(raw)
        result = _editor(Workspace(tmp_path), how)("x = 2", "x = 3")
        assert result.error is None, result.error
        assert (tmp_path / "f.txt").read_bytes() == raw.replace(b"x = 2", b"x = 3")
    assert decoded == ["f.txt", "f.txt"]


@pytest.mark.parametrize("how", ["edit_file", "str_replace"])
def test_a_change_sliding_across_repeated_lines_gets_the_whole_files_hunk(
    tmp_path: Path, how: str
) -> None:
    # Deleting one of ten blank lines changes, as a diff sees it, the last of them: far
    # past the lines around the edit's place, and its hunk needs the line after the run.
    old = b"a\n" + b"\n" * 10 + b"b\n"
    (tmp_path / "f.txt").write_bytes(old)
    result = _editor(Workspace(tmp_path), how)("a\n\n", "a\n")
    assert result.error is None, result.error
    new = b"a\n" + b"\n" * 9 + b"b\n"
    assert (tmp_path / "f.txt").read_bytes() == new
    assert result.details.diff.splitlines()[3:] == ["@@ -8,5 +8,4 @@", " ", " ", " ", "-", " b"]
    assert_diff_reproduces(tmp_path / "scratch", "f.txt", old, new, result.details)


@pytest.mark.parametrize(
    ("old", "expected"),
    [
        ("x = ", b"def f():\n    1  # one\n    y = 2\n"),
        ("  # one", b"def f():\n    x = 1\n    y = 2\n"),
        ("x = 1  # one\n", b"def f():\n    y = 2\n"),
        ("x = 1  # one", b"def f():\n\n    y = 2\n"),
    ],
)
@pytest.mark.parametrize("bom", [b"", b"\xef\xbb\xbf"], ids=["bytes", "text"])
def test_a_deletion_in_an_indented_line_is_the_same_on_bytes_and_on_text(
    tmp_path: Path, old: str, expected: bytes, bom: bytes
) -> None:
    # On bytes, the lines around the place are all the edit sees: the rest of the line
    # the deletion ends in too, as the text path sees it.
    (tmp_path / "f.py").write_bytes(bom + b"def f():\n    x = 1  # one\n    y = 2\n")
    result = call(tools(Workspace(tmp_path))["edit_file"], path="f.py", old_text=old, new_text="")
    assert result.error is None, result.error
    assert (tmp_path / "f.py").read_bytes() == bom + expected


@pytest.mark.parametrize(
    ("edits", "expected"),
    [
        # The second deletion ends inside the lines the first edit changed, one character
        # before the line's end (their last line, one before it); then on the line after.
        ([("x = 1", "x = 2"), ("x = ", "")], b"def f():\n    2\n    y = 2\n"),
        ([("x = 1", "x = 2"), ("y = ", "")], b"def f():\n    x = 2\n    2\n"),
        ([("x = 1\n    y = 2", "x = 2\n    y = 3"), ("x = ", "")], b"def f():\n    2\n    y = 3\n"),
    ],
)
@pytest.mark.parametrize("bom", [b"", b"\xef\xbb\xbf"], ids=["bytes", "text"])
def test_a_later_deletion_in_an_indented_line_is_the_same_on_bytes_and_on_text(
    tmp_path: Path, edits: list[tuple[str, str]], expected: bytes, bom: bytes
) -> None:
    (tmp_path / "f.py").write_bytes(bom + b"def f():\n    x = 1\n    y = 2\n")
    listed = [{"old_text": old, "new_text": new} for old, new in edits]
    result = call(tools(Workspace(tmp_path))["edit_file"], path="f.py", edits=listed)
    assert result.error is None, result.error
    assert (tmp_path / "f.py").read_bytes() == bom + expected


def test_a_file_changed_on_disk_is_refused_before_its_bytes_are_edited(tmp_path: Path) -> None:
    (tmp_path / "f.txt").write_bytes(b"a = 1\nb = 2\n")
    edit = tools(Workspace(tmp_path))["edit_file"]
    assert call(edit, path="f.txt", old_text="a = 1", new_text="a = 3").error is None
    (tmp_path / "f.txt").write_bytes(b"a = 3\nb = 4\n")
    result = call(edit, path="f.txt", old_text="b = 4", new_text="b = 5")
    assert result.error_code.value == "STALE_FILE", result.error
    assert (tmp_path / "f.txt").read_bytes() == b"a = 3\nb = 4\n"


def test_a_lone_surrogate_is_refused_by_the_text_path_with_its_line(tmp_path: Path) -> None:
    (tmp_path / "f.txt").write_bytes(b"a\nb\nc\n")
    result = call(
        tools(Workspace(tmp_path))["edit_file"], path="f.txt", old_text="c", new_text="\ud800"
    )
    assert result.error_code.value == "ENCODING_ERROR", result.error
    assert "line 3" in result.error
    assert (tmp_path / "f.txt").read_bytes() == b"a\nb\nc\n"


@pytest.mark.parametrize(
    ("old", "new", "at_start", "at_end", "fits"),
    [
        ("a\nb\nc\nd\nX\ne\nf\ng\n", "a\nb\nc\nd\nY\ne\nf\ng\n", False, False, True),
        # The third line after the change not ended in the window: the text may go on.
        ("a\nb\nc\nd\nX\ne\nf\ng", "a\nb\nc\nd\nY\ne\nf\ng", False, False, False),
        ("a\nb\nc\nd\nX\ne\nf\ng", "a\nb\nc\nd\nY\ne\nf\ng", False, True, True),
        # Two lines before it.
        ("b\nc\nX\ne\nf\ng\nh\n", "b\nc\nY\ne\nf\ng\nh\n", False, False, False),
        ("b\nc\nX\ne\nf\ng\nh\n", "b\nc\nY\ne\nf\ng\nh\n", True, False, True),
        # One of many blank lines deleted: the change slides past the window's end.
        ("a\nb\nc\nd\n\n\n\n\n\n", "a\nb\nc\nd\n\n\n\n\n", False, False, False),
        ("a\nb\nc\nd\n\n\n\n\n\n", "a\nb\nc\nd\n\n\n\n\n", False, True, True),
    ],
)
def test_a_diff_fits_a_window_holding_its_hunks_lines(
    old: str, new: str, at_start: bool, at_end: bool, fits: bool
) -> None:
    assert diff_fits_window(old, new, (0, 0), at_start=at_start, at_end=at_end) is fits


def test_a_window_grows_until_a_sliding_change_stops_inside_it() -> None:
    # Deleting the first X of four: the diff's change is where the run meets Y, the last
    # line of the first window, with three lines after it only in a larger one.
    text = "p\n" * 5 + "X\n" * 4 + "Y\n" + "q\n" * 5
    made = [Replacement("p\nX\n", "p\n")]
    window = replace_in_window(text.encode(), made, newline="\n", path="f")
    assert window is not None
    _, _, diff = _whole(text, made, "\n")
    above = text.encode().count(b"\n", 0, window.start)
    assert unified_diff(window.old, window.new, "f", lines_above=above).diff == diff
    assert window.stop >= text.index("Y\n") + len("Y\nq\nq\nq\n")
