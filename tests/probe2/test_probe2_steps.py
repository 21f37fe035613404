"""Step records and the trace serialise to JSON (UTF-8) whatever the file names: a name
that is not UTF-8 is held as lone surrogates, written as their escape text, as tool
results write them."""

from __future__ import annotations

import json
import os
from pathlib import Path

from workspace_tools import ToolSession
from workspace_tools.session._steps import SessionRecord

NAME = b"caf\xe9.txt".decode("utf-8", "surrogateescape")
ESCAPED = "caf\\udce9.txt"  # the escape text: the JSON string "caf\udce9.txt" names the file


def test_a_session_record_with_a_name_that_is_not_utf8_is_json(tmp_path: Path) -> None:
    (tmp_path / "sub").mkdir()
    os.symlink("x", os.fsencode(tmp_path) + b"/link\xff")
    with ToolSession(tmp_path, checkpoints=True) as session:
        session.call_sync("write_file", {"path": NAME, "content": "x\n"})
        session.call_sync("read_file", {"path": NAME})
        session.call_sync("edit_file", {"path": NAME, "old_text": "x", "new_text": "y"})
        record = session.record()
        rendered = session.render_summary()
    text = record.model_dump_json()
    text.encode("utf-8")  # what a log file or a socket needs
    loaded = json.loads(text)
    assert [step["input"]["path"] for step in loaded["steps"]] == [ESCAPED] * 3
    assert loaded["steps"][0]["changed_files"] == [
        {"path": ESCAPED, "change": "created", "type": "file", "restorable": True}
    ], loaded["steps"][0]
    assert SessionRecord.model_validate_json(text).steps[0].input["path"] == ESCAPED
    for step in session.steps:
        step.model_dump_json().encode("utf-8")
    for event in session.trace:
        event.model_dump_json().encode("utf-8")
    rendered.encode("utf-8")  # a terminal or a log
    assert ESCAPED in rendered, rendered


def test_a_restore_of_a_name_that_is_not_utf8_reads_as_json(tmp_path: Path) -> None:
    with ToolSession(tmp_path, checkpoints=True) as session:
        session.call_sync("write_file", {"path": NAME, "content": "x\n"})
        restored = session.undo()
        assert json.loads(restored.model_dump_json())["files"] == [
            {"path": ESCAPED, "change": "deleted", "type": "file", "restorable": True}
        ]
        session.call_sync("write_file", {"path": NAME, "content": "x\n"})
        undone = session.call_sync(session.undo_tool(), {})
        assert undone.error is None, undone.error
        text = undone.model_text()
        text.encode("utf-8")
        assert ESCAPED in text, text
        session.record().model_dump_json().encode("utf-8")
    assert not (tmp_path / NAME).exists()
