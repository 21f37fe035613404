"""The README's Python names are real: what its examples import, the dotted names it gives, and
the public API its API paragraph lists, so a reader who copies them gets no ImportError."""

from __future__ import annotations

import ast
import importlib
import re
from pathlib import Path

import pytest

import workspace_tools

README = Path(__file__).resolve().parent.parent / "README.md"
OUR_PACKAGES = ("workspace_tools", "sandbox")


def _python_blocks() -> list[str]:
    return re.findall(r"^```python\n(.*?)^```", README.read_text(encoding="utf-8"), re.M | re.S)


def _our_imports() -> list[tuple[str, str]]:
    """(module, name) for each ``from <ours> import name`` of the README's Python blocks."""
    found = []
    for block in _python_blocks():
        # Blocks use ``await`` at top level (the README says they run inside an async def).
        tree = ast.parse(block.replace("await ", ""))
        for node in ast.walk(tree):
            if (
                isinstance(node, ast.ImportFrom)
                and (node.module or "").split(".")[0] in OUR_PACKAGES
            ):
                found += [(node.module, alias.name) for alias in node.names]
    return found


def _resolve(dotted: str) -> object:
    """The object a dotted name names: the longest importable module prefix, then attributes."""
    parts = dotted.split(".")
    for cut in range(len(parts), 0, -1):
        try:
            value: object = importlib.import_module(".".join(parts[:cut]))
        except ModuleNotFoundError:
            continue
        for attribute in parts[cut:]:
            value = getattr(value, attribute)
        return value
    raise ModuleNotFoundError(dotted)


def test_the_readme_has_python_examples_importing_our_names() -> None:
    imports = _our_imports()
    assert ("workspace_tools", "invoke_tool") in imports, imports
    assert ("workspace_tools.adapters.remote", "RemoteWorkspace") in imports, imports


@pytest.mark.parametrize(("module", "name"), sorted(set(_our_imports())))
def test_every_name_a_readme_example_imports_exists(module: str, name: str) -> None:
    assert hasattr(importlib.import_module(module), name), f"from {module} import {name}"


@pytest.mark.parametrize(
    "dotted",
    sorted(
        set(re.findall(r"`((?:workspace_tools|sandbox)\.[A-Za-z_][\w.]*)`", README.read_text()))
    ),
)
def test_every_dotted_name_in_the_readme_exists(dotted: str) -> None:
    _resolve(dotted)


def test_the_api_paragraph_names_every_public_name_and_counts_them() -> None:
    text = README.read_text(encoding="utf-8")
    match = re.search(
        r"The API is what `workspace_tools.__all__` lists \((\d+) names\):(.*?)\n\n", text, re.S
    )
    assert match, "the README's API paragraph is missing"
    count, paragraph = int(match.group(1)), match.group(2)
    assert count == len(workspace_tools.__all__), (count, len(workspace_tools.__all__))
    named = set(re.findall(r"`(\w+)`", paragraph))
    events = {"ToolCallStartEvent", "ToolCallEndEvent", "ToolUpdateEvent", "ToolResultEvent"}
    # "the four events" stands for the four event classes, which the README names just above.
    missing = (
        set(workspace_tools.__all__) - named - (events if "the four events" in paragraph else set())
    )
    assert missing == set(), sorted(missing)
