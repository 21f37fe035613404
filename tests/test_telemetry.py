"""OpenTelemetry spans of tool calls, read back with the SDK's in-memory exporter.

The global tracer provider can be set once per process, so the calls run in a child
interpreter.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

SCRIPT = """
import json
from opentelemetry import trace
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from workspace_tools import invoke_tool_sync
from workspace_tools.tools import workspace_tools

tools = {t.name: t for t in workspace_tools(ROOT)}
invoke_tool_sync(tools["read_file"], {"path": "README.md"}, call_id="before")
exporter = InMemorySpanExporter()
provider = TracerProvider()
provider.add_span_processor(SimpleSpanProcessor(exporter))
trace.set_tracer_provider(provider)
invoke_tool_sync(tools["read_file"], {"path": "README.md"}, call_id="ok")
invoke_tool_sync(tools["read_file"], {"path": "no/such/file"}, call_id="missing")
print(json.dumps([
    {"name": s.name, "kind": s.kind.name, "status": s.status.status_code.name,
     "attributes": dict(s.attributes)}
    for s in exporter.get_finished_spans()
]))
"""


def test_each_call_is_an_execute_tool_span_once_a_provider_is_set() -> None:
    completed = subprocess.run(
        [sys.executable, "-c", SCRIPT.replace("ROOT", repr(str(ROOT)))],
        capture_output=True,
        text=True,
        cwd=ROOT,
        check=True,
    )
    common = {"gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": "read_file"}
    assert json.loads(completed.stdout) == [
        {
            "name": "execute_tool read_file",
            "kind": "INTERNAL",
            "status": "UNSET",
            "attributes": {**common, "gen_ai.tool.call.id": "ok"},
        },
        {
            "name": "execute_tool read_file",
            "kind": "INTERNAL",
            "status": "ERROR",
            "attributes": {**common, "gen_ai.tool.call.id": "missing", "error.type": "NOT_FOUND"},
        },
    ]


NAMED_SCRIPT = """
import json, os
from opentelemetry import trace
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from workspace_tools import invoke_tool_sync
from workspace_tools.tools import workspace_tools

tools = {t.name: t for t in workspace_tools(ROOT)}
invoke_tool_sync(tools["read_file"], {"path": "README.md"}, call_id="unnamed")
os.environ["OTEL_PYTHON_TRACER_PROVIDER"] = "sdk_tracer_provider"
invoke_tool_sync(tools["read_file"], {"path": "README.md"}, call_id="loads")
exporter = InMemorySpanExporter()
trace.get_tracer_provider().add_span_processor(SimpleSpanProcessor(exporter))
invoke_tool_sync(tools["read_file"], {"path": "README.md"}, call_id="named")
spans = exporter.get_finished_spans()
print(json.dumps([dict(s.attributes)["gen_ai.tool.call.id"] for s in spans]))
"""


def test_a_provider_the_environment_names_is_loaded_by_the_next_call() -> None:
    # Named after the process started and before any call asked the API for one: the next
    # call loads it, as the API's get_tracer_provider does, and later calls are its spans.
    completed = subprocess.run(
        [sys.executable, "-c", NAMED_SCRIPT.replace("ROOT", repr(str(ROOT)))],
        capture_output=True,
        text=True,
        cwd=ROOT,
        check=True,
    )
    assert json.loads(completed.stdout) == ["named"]
