from __future__ import annotations

from pathlib import Path

import pytest

from tests.file_support import assert_diff_reproduces, call, tools
from workspace_tools import ErrorCode


@pytest.fixture
def root(tmp_path: Path) -> Path:
    path = tmp_path / "w"
    path.mkdir()
    return path


# (name, file bytes, old_text, new_text, expected bytes, match kind)
EDITS = [
    (
        "crlf_kept_in_every_line",
        b"class A {\r\n  int x = 1;\r\n}\r\n",
        "  int x = 1;\n}",
        "  int x = 2;\n}",
        b"class A {\r\n  int x = 2;\r\n}\r\n",
        "exact",
    ),
    (
        "crlf_kept_in_inserted_lines",
        b"a\r\nb\r\n",
        "b\n",
        "b\nc\nd\n",
        b"a\r\nb\r\nc\r\nd\r\n",
        "exact",
    ),
    (
        # old_text starting with an LF (deleting the blank line before a line, joining a
        # line onto the one before) takes the CRLF whole, not its LF alone.
        "crlf_blank_line_deleted_whole",
        b"import os\r\n\r\n\r\ndef f():\r\n    pass\r\n",
        "\ndef f():",
        "def f():",
        b"import os\r\n\r\ndef f():\r\n    pass\r\n",
        "exact",
    ),
    (
        "crlf_lines_joined_whole",
        b"x = (1,\r\n     2)\r\n",
        "\n     2)",
        " 2)",
        b"x = (1, 2)\r\n",
        "exact",
    ),
    (
        "crlf_break_replaced_by_lines_keeps_crlf",
        b"\tt\r\n",
        "\n",
        "Q\nR",
        b"\ttQ\r\nR",
        "exact",
    ),
    (
        "utf16_crlf_blank_line_deleted_whole",
        "a\r\n\r\nc\r\n".encode("utf-16"),
        "\nc",
        "c",
        "a\r\nc\r\n".encode("utf-16"),
        "exact",
    ),
    (
        "latin1_bytes_outside_edit_kept",
        b"// opera\xe7\xe3o\nx = 1\n",
        "x = 1",
        "x = 2",
        b"// opera\xe7\xe3o\nx = 2\n",
        "exact",
    ),
    (
        "latin1_text_in_edit_encoded_latin1",
        b"// opera\xe7\xe3o\nx = 1\n",
        "operação",
        "ação",
        b"// a\xe7\xe3o\nx = 1\n",
        "exact",
    ),
    (
        "utf16_bom_le_and_crlf_kept",
        "Hello\r\nx = 1\r\n".encode("utf-16"),
        "x = 1\n",
        "x = 2\ny = 3\n",
        "Hello\r\nx = 2\r\ny = 3\r\n".encode("utf-16"),
        "exact",
    ),
    (
        "utf8_typographic_apostrophe_untouched",
        's = "l’image"\nx = 1\n'.encode(),
        "x = 1",
        "x = 2",
        b's = "l\xe2\x80\x99image"\nx = 2\n',
        "exact",
    ),
    (
        "regex_syntax_written_literally",
        b"cmd = X\n",
        "X",
        r"pid=$$; m=$&; r=\1 \g<0>",
        b"cmd = pid=$$; m=$&; r=\\1 \\g<0>\n",
        "exact",
    ),
    (
        "makefile_tabs_kept",
        b"all: build\n\ttouch a\n\techo done\nbuild:\n\tcc -o x x.c\n",
        "\techo done",
        "\techo finished",
        b"all: build\n\ttouch a\n\techo finished\nbuild:\n\tcc -o x x.c\n",
        "exact",
    ),
    (
        "makefile_spaces_in_old_text_reindented_to_tabs",
        b"all:\n\ttouch a\n\techo done\n",
        "    touch a\n    echo done\n",
        "    touch b\n    echo done\n",
        b"all:\n\ttouch b\n\techo done\n",
        "indentation",
    ),
    (
        "trailing_whitespace_tolerated",
        b"def f():  \n    return 1\n",
        "def f():\n    return 1\n",
        "def f():\n    return 2\n",
        b"def f():\n    return 2\n",
        "trailing_whitespace",
    ),
    (
        "indentation_tolerated_and_new_text_reindented",
        b"class C:\n    def f(self):\n        return 1\n",
        "def f(self):\n    return 1",
        "def f(self):\n    x = 1\n    return x",
        b"class C:\n    def f(self):\n        x = 1\n        return x\n",
        "indentation",
    ),
    (
        "typographic_quotes_tolerated",
        "msg = “hi”\nx = 1\n".encode(),
        'msg = "hi"\n',
        'msg = "hello"\n',
        b'msg = "hello"\nx = 1\n',
        "quotes",
    ),
    (
        "no_final_newline_kept",
        b"a\nb",
        "b",
        "c",
        b"a\nc",
        "exact",
    ),
    (
        "one_line_old_text_without_indentation_keeps_new_lines_at_its_depth",
        b"def f():\n    x = 1\n    return x\n",
        "x = 1",
        "x = 1\ny = 2",
        b"def f():\n    x = 1\n    y = 2\n    return x\n",
        "indentation",
    ),
    (
        "deleting_an_indented_line_by_its_text_leaves_the_next_line_alone",
        b"def f():\n    x = 1\n    return 1\n",
        "x = 1\n",
        "",
        b"def f():\n    return 1\n",
        "indentation",
    ),
    (
        "typographic_quotes_with_uniformly_shifted_indentation",
        "if a:\n    say(“hi”)\n".encode(),
        '  if a:\n      say("hi")\n',
        '  if a:\n      say("bye")\n      done()\n',
        b'if a:\n    say("bye")\n    done()\n',
        "quotes",
    ),
    (
        "tab_indented_file_edited_by_dedented_old_text",
        b"def f(x):\n\tif x:\n\t\ty = 1\n\treturn y\n",
        "if x:\n\ty = 1\n",
        "if x:\n\ty = 2\nelse:\n\ty = 3\n",
        b"def f(x):\n\tif x:\n\t\ty = 2\n\telse:\n\t\ty = 3\n\treturn y\n",
        "indentation",
    ),
    (
        "utf8_bom_kept",
        b"\xef\xbb\xbfa = 1\nb = 2\n",
        "a = 1",
        "a = 3",
        b"\xef\xbb\xbfa = 3\nb = 2\n",
        "exact",
    ),
]


@pytest.mark.parametrize(
    ("content", "old", "new", "expected", "kind"),
    [case[1:] for case in EDITS],
    ids=[case[0] for case in EDITS],
)
def test_edit_writes_exact_bytes(
    root: Path, tmp_path: Path, content: bytes, old: str, new: str, expected: bytes, kind: str
) -> None:
    (root / "f").write_bytes(content)
    result = call(tools(root)["edit_file"], path="f", old_text=old, new_text=new)
    assert result.error is None
    assert (root / "f").read_bytes() == expected
    assert result.content == {"path": "f", "replacements": 1, "match": kind}
    assert result.details.match == kind
    if result.details.encoding in ("utf-8", "utf-8-bom", "latin-1"):
        assert_diff_reproduces(tmp_path / "apply", "f", content, expected, result.details)


def test_model_reads_which_match_was_used(root: Path) -> None:
    (root / "f.py").write_bytes(b"def f(x):\n    if x:\n        y = 1\n    return y\n")
    edit = tools(root)["edit_file"]
    result = call(edit, path="f.py", old_text="if x:\n    y = 1", new_text="if x:\n    y = 2")
    assert result.model_text() == '{"path":"f.py","replacements":1,"match":"indentation"}'
    result = call(edit, path="f.py", old_text="return y", new_text="return -y")
    assert result.model_text() == '{"path":"f.py","replacements":1,"match":"exact"}'
    assert (root / "f.py").read_bytes() == b"def f(x):\n    if x:\n        y = 2\n    return -y\n"


# (name, file bytes, old_text, new_text): a fallback would change the code's structure.
STRUCTURE_CHANGES = [
    (
        "body_at_the_depth_of_its_if",
        b"def f(x):\n    if x:\n        y = 1\n    return y\n",
        "if x:\ny = 1",
        "if x:\ny = 2",
    ),
    (
        "typographic_quotes_and_flattened_body",
        "if a:\n    say(“hi”)\n".encode(),
        'if a:\nsay("hi")\n',
        'if a:\nsay("bye")\n',
    ),
    (
        "spaces_where_the_file_nests_with_tabs",
        b"def f():\n\tif x:\n\t\treturn 1\n",
        "def f():\n    if x:\n        return 1\n",
        "def f():\n    if x:\n        return 2\n",
    ),
    (
        "new_text_left_of_a_shifted_old_text",
        b"class A:\n    def f(self):\n        return 1\n",
        "  def f(self):\n      return 1",
        "  def f(self):\n      return 1\ndef g():\n  pass",
    ),
    (
        "one_line_old_text_and_new_text_left_of_it",
        b"class A:\n    def f(self):\n        return 1\n",
        "  return 1",
        "  return 1\nx = 2",
    ),
]


@pytest.mark.parametrize(
    ("content", "old", "new"),
    [case[1:] for case in STRUCTURE_CHANGES],
    ids=[case[0] for case in STRUCTURE_CHANGES],
)
def test_a_fallback_that_would_change_the_structure_is_no_match(
    root: Path, content: bytes, old: str, new: str
) -> None:
    (root / "f.py").write_bytes(content)
    result = call(tools(root)["edit_file"], path="f.py", old_text=old, new_text=new)
    assert result.error_code is ErrorCode.NO_MATCH, result.content
    assert "Copy old_text with the file's indentation" in result.error
    assert (root / "f.py").read_bytes() == content


def test_structure_refusal_shows_the_files_indentation(root: Path) -> None:
    content = b"def f(x):\n    if x:\n        y = 1\n    return y\n"
    (root / "f.py").write_bytes(content)
    result = call(
        tools(root)["edit_file"], path="f.py", old_text="if x:\ny = 1", new_text="if x:\ny = 2"
    )
    assert result.error == (
        "old_text was not found in f.py exactly. With indentation ignored it matches lines "
        "2-3, but not with the same indentation structure, and an edit never changes the "
        "structure of the code. Past the indentation its lines share, the file indents line 3 "
        "by 4 spaces where old_text indents its line 2 by nothing. Copy old_text with the "
        "file's indentation:\n2: '    if x:'\n3: '        y = 1'"
    )


def test_utf16_file_reads_as_text(root: Path) -> None:
    (root / "f").write_bytes("Hello\r\n".encode("utf-16"))
    result = call(tools(root)["read_file"], path="f")
    assert result.content == "     1\tHello"
    assert (result.details.encoding, result.details.newline) == ("utf-16-le", "crlf")


def test_fallback_never_matches_other_identifiers(root: Path) -> None:
    content = b"def load_user(uid):\n    return db.fetch_user(uid)\n\ndef load_team(tid):\n    return db.fetch_team(tid)\n"  # noqa: E501
    (root / "f.py").write_bytes(content)
    result = call(
        tools(root)["edit_file"],
        path="f.py",
        old_text="def load_tag(tid):\n    return db.fetch_tag(tid)\n",
        new_text="def load_tag(tid):\n    return None\n",
    )
    assert result.error_code is ErrorCode.NO_MATCH
    assert (root / "f.py").read_bytes() == content


def test_ambiguous_match_names_count_and_lines(root: Path) -> None:
    (root / "f").write_bytes(b"x = 1\ny = 2\nx = 1\nz\nx = 1\n")
    result = call(tools(root)["edit_file"], path="f", old_text="x = 1", new_text="x = 9")
    assert result.error_code is ErrorCode.AMBIGUOUS_MATCH
    assert "3 times" in result.error
    assert "lines 1, 3, 5" in result.error
    assert (root / "f").read_bytes() == b"x = 1\ny = 2\nx = 1\nz\nx = 1\n"


def test_replace_all_replaces_every_match(root: Path, tmp_path: Path) -> None:
    (root / "f").write_bytes(b"x = 1\ny = 2\nx = 1\nz\nx = 1\n")
    result = call(
        tools(root)["edit_file"], path="f", old_text="x = 1", new_text="x = 9", replace_all=True
    )
    assert result.content == {"path": "f", "replacements": 3, "match": "exact"}
    assert result.details.replacements == 3
    expected = b"x = 9\ny = 2\nx = 9\nz\nx = 9\n"
    assert (root / "f").read_bytes() == expected
    old = b"x = 1\ny = 2\nx = 1\nz\nx = 1\n"
    assert_diff_reproduces(tmp_path / "apply", "f", old, expected, result.details)


def test_ambiguous_fallback_is_refused(root: Path) -> None:
    (root / "f").write_bytes(b"if a:\n\tgo()\nif b:\n\t\tgo()\n")
    result = call(tools(root)["edit_file"], path="f", old_text="  go()\n", new_text="  stop()\n")
    assert result.error_code is ErrorCode.AMBIGUOUS_MATCH
    assert "lines 2, 4" in result.error


def test_touch_is_not_staleness_but_a_content_change_is(root: Path) -> None:
    import os

    path = root / "f"
    path.write_bytes(b"a = 1\n")
    t = tools(root)
    assert call(t["read_file"], path="f").error is None
    os.utime(path, (1, 1))
    result = call(t["edit_file"], path="f", old_text="a = 1", new_text="a = 2")
    assert result.error is None
    assert path.read_bytes() == b"a = 2\n"
    path.write_bytes(b"a = 2\nb = 1\n")
    result = call(t["edit_file"], path="f", old_text="a = 2", new_text="a = 3")
    assert result.error_code is ErrorCode.STALE_FILE
    assert path.read_bytes() == b"a = 2\nb = 1\n"
    assert call(t["read_file"], path="f").error is None
    assert call(t["edit_file"], path="f", old_text="a = 2", new_text="a = 3").error is None
    assert path.read_bytes() == b"a = 3\nb = 1\n"


@pytest.mark.parametrize(
    ("arguments", "code"),
    [
        ({"old_text": "", "new_text": "x"}, ErrorCode.INVALID_ARGUMENTS),
        ({"old_text": "a", "new_text": "a"}, ErrorCode.INVALID_ARGUMENTS),
        ({"old_text": "zzz", "new_text": "y"}, ErrorCode.NO_MATCH),
    ],
    ids=["empty_old_text", "old_equals_new", "absent"],
)
def test_edit_refusals_leave_file_untouched(
    root: Path, arguments: dict[str, str], code: ErrorCode
) -> None:
    (root / "f").write_bytes(b"a\n")
    result = call(tools(root)["edit_file"], path="f", **arguments)
    assert result.error_code is code
    assert (root / "f").read_bytes() == b"a\n"


@pytest.mark.parametrize(
    ("content", "code"),
    [(b"\x00\x01binary", ErrorCode.BINARY_FILE), (None, ErrorCode.NOT_FOUND)],
    ids=["binary", "missing"],
)
def test_edit_refuses_binary_and_missing(
    root: Path, content: bytes | None, code: ErrorCode
) -> None:
    if content is not None:
        (root / "f").write_bytes(content)
    result = call(tools(root)["edit_file"], path="f", old_text="binary", new_text="text")
    assert result.error_code is code
    if content is not None:
        assert (root / "f").read_bytes() == content


def test_text_outside_the_encoding_is_an_encoding_error(root: Path) -> None:
    (root / "f").write_bytes(b"caf\xe9\n")
    result = call(tools(root)["edit_file"], path="f", old_text="caf", new_text="€ caf")
    assert result.error_code is ErrorCode.ENCODING_ERROR
    assert (root / "f").read_bytes() == b"caf\xe9\n"


def test_edit_keeps_mode(root: Path) -> None:
    path = root / "run.sh"
    path.write_bytes(b"echo a\n")
    path.chmod(0o751)
    assert call(tools(root)["edit_file"], path="run.sh", old_text="a", new_text="b").error is None
    assert path.stat().st_mode & 0o7777 == 0o751


@pytest.mark.parametrize("tool_name", ["edit_file", "write_file"])
def test_files_over_the_size_limit_are_not_rewritten(root: Path, tool_name: str) -> None:
    (root / "f").write_bytes(b"a = 1\n" * 10)
    arguments = (
        {"old_text": "a = 1", "new_text": "a = 2", "replace_all": True}
        if tool_name == "edit_file"
        else {"content": "short\n"}
    )
    result = call(tools(root, max_file_bytes=32)[tool_name], path="f", **arguments)
    assert result.error_code is ErrorCode.FILE_TOO_LARGE
    assert (root / "f").read_bytes() == b"a = 1\n" * 10


def test_workspace_pickles_as_its_settings_and_carries_the_named_files_hashes(
    root: Path,
) -> None:
    import pickle

    from workspace_tools import Workspace

    workspace = Workspace(root, read_limit=7, fsync=False)
    (root / "f").write_bytes(b"a\n")
    call(tools(workspace)["read_file"], path="f")
    (root / "f").write_bytes(b"b\n")
    copy = pickle.loads(pickle.dumps(workspace))
    assert (copy.root, copy.options) == (workspace.root, workspace.options)
    # Fresh states: the copy never saw f, so its edit is not stale there...
    assert copy.file_states.snapshot() == {}
    # ...until it is given the hashes of the file a call names, as a sandboxed call is.
    copy.restore_files(workspace.snapshot_files(workspace.named_files(["f", "../out"])))
    result = call(tools(copy)["edit_file"], path="f", old_text="b", new_text="c")
    assert result.error_code is ErrorCode.STALE_FILE
