"""Validate a request dict against an SDK's own TypedDict, keys and nested lists included."""

from __future__ import annotations

from typing import Any

from pydantic import TypeAdapter


def _materialise(value: Any) -> Any:
    # Iterable[...] fields validate lazily; consuming them runs the item validators.
    if isinstance(value, dict):
        return {k: _materialise(v) for k, v in value.items()}
    if isinstance(value, (str, bytes)):
        return value
    if hasattr(value, "__iter__"):
        return [_materialise(v) for v in value]
    return value


def sdk_valid(type_: Any, value: Any) -> bool:
    """Whether ``value`` validates as ``type_`` and nothing was dropped on the way (pydantic
    ignores unknown TypedDict keys, so an unknown key shows up as a difference)."""
    validated = TypeAdapter(type_).validate_python(value)
    return _materialise(validated) == _materialise(value)
