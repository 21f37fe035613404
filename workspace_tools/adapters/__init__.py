"""Adapters that hand the workspace tools to agent frameworks and model providers.

Each adapter module imports its SDK lazily and names the extra that installs it:
``workspace_tools.adapters.mcp`` (``[mcp]``), ``.openai`` (none needed for schemas and
messages), ``.anthropic`` (none needed), ``.pydantic_ai`` (``[pydantic-ai]``).
The core package never imports this package.
"""
