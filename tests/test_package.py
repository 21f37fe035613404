"""The package's shape: the public API is what ``__all__`` lists, and modules depend one way."""

from __future__ import annotations

import ast
import graphlib
import subprocess
import sys
import types
from pathlib import Path

import pytest

import workspace_tools

PACKAGE = Path(workspace_tools.__file__).parent


def test_the_package_exports_exactly_what_all_lists() -> None:
    listed = [name for name in dir(workspace_tools) if not name.startswith("_")]
    assert listed == sorted(workspace_tools.__all__)
    loaded = {name: getattr(workspace_tools, name) for name in workspace_tools.__all__}
    assert [name for name, value in loaded.items() if isinstance(value, types.ModuleType)] == []
    exported = {
        name
        for name, value in vars(workspace_tools).items()
        if not name.startswith("_") and not isinstance(value, types.ModuleType)
    }
    assert sorted(exported) == sorted(workspace_tools.__all__)
    with pytest.raises(AttributeError, match="no_such_name"):
        workspace_tools.no_such_name  # noqa: B018


def test_importing_the_package_loads_a_name_only_when_it_is_used() -> None:
    """``import workspace_tools`` imports none of its modules until a name is used, and a
    name loads only the modules it needs (a custom tool's module imports ``tool``)."""
    code = (
        "import sys, workspace_tools\n"
        "def ours(): return sorted(m for m in sys.modules if m.startswith('workspace_tools'))\n"
        "print(ours())\n"
        "workspace_tools.tool\n"
        "print([m for m in ours() if m.startswith(('workspace_tools.session', "
        "'workspace_tools.tools', 'workspace_tools.search', 'workspace_tools.adapters'))])\n"
        "from workspace_tools import *\n"
        "print(len([m for m in ours() if m.startswith('workspace_tools.tools.')]) > 0)\n"
    )
    shown = _printed(code)
    assert shown == ["['workspace_tools']", "[]", "True"], shown


def _printed(code: str) -> list[str]:
    """The lines ``code`` prints in a fresh interpreter (nothing of the package imported)."""
    return subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    ).stdout.splitlines()


def test_a_subpackage_is_reached_from_the_package_as_when_it_loaded_eagerly() -> None:
    """After ``import workspace_tools`` alone, ``workspace_tools.tools.read_file.execute``
    (the README's way to name a built-in tool's function) works as it did when the package
    imported its parts at once; an unknown name is refused in Python's own words, with its
    suggestion."""
    code = (
        "import workspace_tools\n"
        "print(workspace_tools.tools.read_file.execute.__qualname__)\n"
        "print(workspace_tools.adapters.__name__)\n"
        "try:\n"
        "    workspace_tools.tol\n"
        "except AttributeError as exc:\n"
        "    print(exc, exc.name)\n"
        "print(hasattr(workspace_tools, '_no_such_module'))\n"
    )
    shown = _printed(code)
    assert shown == [
        "execute",
        "workspace_tools.adapters",
        "module 'workspace_tools' has no attribute 'tol' tol",
        "False",
    ], shown


def test_command_line_and_mcp_terms_are_not_in_the_core_api() -> None:
    edge_names = {
        "add_policy_arguments",
        "parse_policy_flag",
        "policy_from_arguments",
        "policy_from_flags",
        "ConfirmationForm",
        "confirmation_from_elicitation",
    }
    assert edge_names & set(workspace_tools.__all__) == set()


def _module_names() -> dict[str, Path]:
    names = {}
    for path in PACKAGE.rglob("*.py"):
        parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
        names[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return names


def _imports(module: str, path: Path, modules: dict[str, Path]) -> set[str]:
    """The package's modules that ``module`` imports anywhere in its code, function-level
    imports included (a lazy import still makes a cycle of the design)."""
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    found = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parent = package.rsplit(".", node.level - 1)[0]
                base = f"{parent}.{base}" if base else parent
            submodules = {f"{base}.{alias.name}" for alias in node.names} & modules.keys()
            # ``from . import tools`` needs the submodule; ``from . import __version__`` the
            # package itself.
            found.update(submodules)
            if node.module or len(submodules) < len(node.names):
                found.add(base)
    return {name for name in found if name in modules and name != module}


def test_no_module_imports_a_module_that_imports_it_back() -> None:
    modules = _module_names()
    graph = {name: _imports(name, path, modules) for name, path in modules.items()}
    assert graph["workspace_tools.cli._main"] >= {"workspace_tools.cli._demo"}, graph[
        "workspace_tools.cli._main"
    ]
    try:
        graphlib.TopologicalSorter(graph).prepare()
    except graphlib.CycleError as exc:
        raise AssertionError(f"import cycle: {' -> '.join(exc.args[1])}") from None


def test_the_sandbox_package_exports_what_all_lists_each_from_its_home() -> None:
    import sandbox

    resolved = {name: getattr(sandbox, name) for name in sandbox.__all__}
    assert sorted(resolved) == sorted(set(sandbox.__all__))
    assert set(sandbox.__all__) <= set(dir(sandbox))
    assert sandbox.Sandbox.__module__ == "sandbox._sandbox"
    from sandbox.spawn import _client

    assert sandbox.COMMAND_OWNER is _client.COMMAND_OWNER
    with pytest.raises(AttributeError, match="missing"):
        sandbox.missing  # noqa: B018


def test_the_spawn_server_starts_without_the_callers_side_of_the_sandbox() -> None:
    # The server is started for every first command of a sandbox: what it imports is time
    # before that command starts. The calls' side is imported by its first calls worker.
    code = (
        "import sys; import sandbox.spawn._server; "
        "print(sorted(m for m in ('anyio', 'cloudpickle', 'sandbox._sandbox', "
        "'sandbox.spawn._calls', 'pydantic', 'workspace_tools') if m in sys.modules))"
    )
    found = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    ).stdout
    assert found == "[]\n", found
