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
from workspace_tools.adapters import anthropic_text_editor
from workspace_tools.adapters.anthropic_text_editor import text_editor_tool
from workspace_tools.text._decode import dominant_newline
from workspace_tools.text._diff import unified_diff
from workspace_tools.text._line_counts import LineCounts
from workspace_tools.text._match import replace_in_window, replace_text
from workspace_tools.tools import edit_file
from workspace_tools.workspace import _state, _textfile

ALPHABETS = st.sampled_from([" \tab=:", " \tab=:\u00e9\u65e5"])
ENDING = st.sampled_from(["\n", "\n", "\n", "\r\n", "\r"])
NEW = st.text(alphabet="ab \t\n\r\u00e9", max_size=10) | st.just("a\ud800")


@st.composite
def texts(draw: st.DrawFn) -> str:
    """Lines (ASCII, or with é and 日), LF, CRLF or a lone CR each, the last one maybe
    unterminated."""
    line = st.text(alphabet=draw(ALPHABETS), max_size=7)
    lines = draw(st.lists(st.tuples(line, ENDING), max_size=24))
    return "".join(line + ending for line, ending in lines) + draw(st.just("") | line)


@st.composite
def edits(draw: st.DrawFn) -> tuple[str, str, str, bool]:
    """A text, an ``old_text`` cut from it (as it is, or as a model may copy it), a new
    text and ``replace_all``."""
    text = draw(texts())
    start = draw(st.integers(0, len(text)))
    old = text[start : draw(st.integers(start, len(text)))]
    how = draw(st.sampled_from(["as is", "as is", "lf", "dedented", "made up"]))
    if how == "lf":
        old = old.replace("\r\n", "\n")
    elif how == "dedented":
        old = "\n".join(line.lstrip(" \t") for line in old.split("\n"))
    elif how == "made up":
        old = draw(st.text(alphabet="ab=\n\u00e9\u65e5", min_size=1, max_size=6))
    if not old:
        old = draw(st.sampled_from(["a", "b\n", "=", "\u00e9"]))
    return text, old, draw(NEW), draw(st.booleans())


@settings(max_examples=1500, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(edit=edits())
def test_an_edit_made_in_its_window_is_the_whole_texts_edit(
    edit: tuple[str, str, str, bool],
) -> None:
    text, old, new, replace_all = edit
    newline = dominant_newline(text) or "\n"
    data = text.encode()
    window = replace_in_window(data, old, new, replace_all=replace_all, newline=newline, path="f")
    if window is None:
        return  # the text path makes it (or refuses it)
    whole = replace_text(text, old, new, replace_all=replace_all, newline=newline, path="f")
    result = window.result
    assert window.old == data[window.start : window.stop].decode()
    before, after = data[: window.start].decode(), data[window.stop :].decode()
    assert before + result.text + after == whole.text
    assert (result.replacements, result.match) == (whole.replacements, whole.match)
    assert unified_diff(
        window.old,
        result.text,
        "f",
        unchanged=result.unchanged,
        lines_above=data.count(b"\n", 0, window.start),
    ) == unified_diff(text, whole.text, "f", unchanged=whole.unchanged)
    if not text.isascii():
        return  # counts are carried for an ASCII text only (of characters, its bytes)
    with _small_steps():
        counts = LineCounts()
        counts.before(text, len(text))  # counts known all along the old text
        carried = counts.changed(window.old, result.text, result.unchanged, at=window.start)
        for at, count in carried._known:
            assert count == whole.text.count("\n", 0, at), (at, carried._known)


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
        replace_in_window(text.encode(), old, "z", replace_all=False, newline="\n", path="f")
        is None
    ), why


def test_a_window_holds_the_edit_and_one_line_more_than_the_diffs_context() -> None:
    text = "".join(f"line {i}\n" for i in range(20))
    window = replace_in_window(
        text.encode(), "line 10\nline 11\n", "x\n", replace_all=False, newline="\n", path="f"
    )
    assert window is not None
    assert (window.start, window.stop) == (text.index("line 6\n"), text.index("line 16\n"))
    assert window.result.text == window.old.replace("line 10\nline 11\n", "x\n")


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
