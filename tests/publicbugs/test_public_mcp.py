"""The MCP server and results as JSON against public reports on peers' MCP servers."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import pytest

from tests.adapters.test_mcp_jsonrpc import RawServer
from tests.file_support import call, tools

BAD_NAME = b"bad\xff.txt"  # a Latin-1 name, not UTF-8: Python holds it as "bad\udcff.txt"


@pytest.fixture
def root(tmp_path: Path) -> Path:
    if sys.platform == "darwin":
        pytest.skip("macOS file systems refuse names that are not UTF-8")
    path = tmp_path / "w"
    path.mkdir()
    with open(os.path.join(os.fsencode(path), BAD_NAME), "wb") as handle:
        handle.write(b"needle\n")
    (path / "ok.txt").write_text("needle\n")
    return path


def test_a_name_that_is_not_utf8_is_shown_escaped_and_reads_back(root: Path) -> None:
    """https://github.com/modelcontextprotocol/servers/issues/2113 (one bad entry took the
    whole filesystem server down): a file name that is not UTF-8 made every result that
    named it fail to serialise. The model reads it as a JSON string that names the file
    again, and the result serialises."""
    t = tools(root)
    listed = call(t["list_files"])
    assert listed.model_text() == '"bad\\udcff.txt"\nok.txt'
    assert json.loads(listed.model_dump_json())["details"]["entries"][0]["path"] == (
        "bad\\udcff.txt"
    )
    assert call(t["glob"], pattern="*.txt").model_text() == '"bad\\udcff.txt"\nok.txt'
    grep = call(t["grep"], pattern="needle")
    assert grep.model_text() == '"bad\\udcff.txt":1:needle\nok.txt:1:needle'
    json.loads(grep.model_dump_json())
    name = json.loads(listed.model_text().split("\n")[0])
    assert os.fsencode(name) == BAD_NAME
    read = call(t["read_file"], path=name)
    assert read.model_text() == "     1\tneedle"
    missing = call(t["read_file"], path=name + ".orig")
    assert missing.model_text() == "File not found: bad\\udcff.txt.orig"
    json.loads(missing.model_dump_json())


def test_the_mcp_server_answers_and_stays_up(root: Path) -> None:
    """https://github.com/modelcontextprotocol/servers/issues/2113: the server must answer
    a call whose result names such a file, and go on serving."""
    server = RawServer(root)
    try:
        server.initialize()
        for name, arguments in (
            ("list_files", {}),
            ("grep", {"pattern": "needle"}),
            ("read_file", {"path": "bad\udcff.txt"}),
        ):
            response = server.request("tools/call", {"name": name, "arguments": arguments})
            result = response["result"]
            assert result["isError"] is False, result
        listed = server.request("tools/call", {"name": "list_files", "arguments": {}})
        assert listed["result"]["content"][0]["text"] == '"bad\\udcff.txt"\nok.txt'
        server.assert_lists_tools()
    finally:
        assert server.close() == 0
