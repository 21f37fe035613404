"""What a sandboxed call's outcome may rebuild in the caller's process.

A call's child sends its outcome back as a pickle. The child ran the call's code under the
sandbox's layers, so the pickle is untrusted: with ``pickle.loads`` it could name any
function (``os.system``, ``builtins.eval``) and have the caller run it, outside every
layer. So could any process of the call that writes to the result pipe first (it can
reach the call child's descriptors). :func:`load_outcome` rebuilds data only: its
unpickler resolves a name (``find_class``) only to

- ``complex`` and ``slice`` (numbers, strings, bytes and containers have opcodes of
  their own) and the builtin exception classes;
- the standard library's value types (:data:`_VALUE_TYPES`, with the functions that
  build them, :data:`_BUILDERS`);
- a class defined in a module the caller has already imported (none is imported for a
  pickle) that is an exception, an ``enum.Enum``, a dataclass, a named tuple or a
  ``pydantic.BaseModel``: rebuilding one runs its own constructor or ``__setstate__``,
  code its author wrote to take data, and no function the pickle chose.

A function, or a class of any other kind (``subprocess.Popen``), is refused: the call
fails with a :class:`~sandbox.SandboxError` naming it; so is a BUILD of a class object
(see :class:`_OutcomeUnpickler`). An exception the call raised that
is no ``Exception`` (``SystemExit``, ``KeyboardInterrupt``) is not raised in the caller,
where it would end the caller: it becomes a ``SandboxError`` saying so.
"""

from __future__ import annotations

import builtins
import dataclasses
import enum
import io
import pickle
import sys
from typing import Any, ClassVar

from sandbox._errors import SandboxError

#: Builtin types a pickle names (the rest have opcodes of their own). Not ``range`` nor
#: the containers: called with one, ``deque`` or ``Counter`` would fill the caller's memory.
_BUILTIN_TYPES = frozenset({complex, slice})

#: Value types of the standard library, by module and name, as pickles name them.
_VALUE_TYPES = {
    "datetime": frozenset({"date", "time", "datetime", "timedelta", "timezone"}),
    "pathlib": frozenset({"PurePath", "PurePosixPath", "PureWindowsPath", "Path", "PosixPath"}),
    "decimal": frozenset({"Decimal"}),
    "uuid": frozenset({"UUID"}),
    "collections": frozenset({"OrderedDict", "deque", "Counter", "defaultdict"}),
    "array": frozenset({"array"}),
}

#: Functions that only build a value of those types from data, as their pickles name them.
_BUILDERS = {("array", "_array_reconstructor")}


class _OutcomeUnpickler(pickle._Unpickler):  # type: ignore[name-defined]
    """Python's own unpickler (the C one cannot be told what BUILD may change), resolving
    names by :func:`_allowed` and refusing to BUILD a class: a pickle's BUILD sets the
    attributes of the object below it, and on a class object itself that would change the
    class in the caller (``SandboxLimits.rlimits`` made to return nothing)."""

    dispatch: ClassVar[dict[int, Any]] = dict(pickle._Unpickler.dispatch)  # type: ignore[attr-defined]

    def load_build(self) -> None:
        if isinstance(self.stack[-2], type):
            raise SandboxError(
                "the sandboxed call's result changes the class "
                f"{self.stack[-2].__qualname__}, which the sandbox does not do in this process"
            )
        pickle._Unpickler.load_build(self)  # type: ignore[attr-defined]

    dispatch[pickle.BUILD[0]] = load_build

    def find_class(self, module: str, name: str) -> Any:
        found = _allowed(module, name)
        if found is None:
            raise SandboxError(
                f"the sandboxed call's result names {module}.{name}, which the sandbox does "
                "not rebuild in this process (a function or a class that is not data could "
                "run code here, outside the sandbox): return plain values, exceptions, "
                "enums, dataclasses, named tuples or pydantic models"
            )
        return found

    def persistent_load(self, pid: Any) -> Any:
        raise SandboxError("the sandboxed call's result holds a persistent reference")


def _allowed(module: str, name: str) -> Any:
    """The class ``module.name`` names, when a result may hold one of it; else ``None``."""
    if module == "builtins":
        found = getattr(builtins, name, None)
        if found in _BUILTIN_TYPES or (
            isinstance(found, type) and issubclass(found, BaseException)
        ):
            return found
        return None
    # Only what is imported already: importing a module runs its code.
    loaded = sys.modules.get(module)
    if loaded is None:
        return None
    if (module, name) in _BUILDERS:
        return getattr(loaded, name)
    found = loaded
    for part in name.split("."):
        if part.startswith("__"):
            return None
        found = getattr(found, part, None)
    if not isinstance(found, type):
        return None
    if name in _VALUE_TYPES.get(module, ()):
        return found
    # Defined there, not a name the module imported (``from subprocess import Popen``).
    if found.__module__ != module or found.__qualname__ != name:
        return None
    if issubclass(found, (BaseException, enum.Enum)) or dataclasses.is_dataclass(found):
        return found
    if issubclass(found, tuple) and hasattr(found, "_fields"):
        return found
    pydantic = sys.modules.get("pydantic")
    if pydantic is not None and issubclass(found, pydantic.BaseModel):
        return found
    return None


def load_outcome(data: bytes) -> tuple[str, Any]:
    """The ``(kind, value)`` a call's child sent (``"ok"``, ``"error"``, ``"unservable"``).

    Raises:
        SandboxError: the pickle names what a result may not hold (see the module), is
            not one, or is an error that is no ``Exception``.
    """
    try:
        outcome = _OutcomeUnpickler(io.BytesIO(data)).load()
    except SandboxError:
        raise
    except Exception as exc:
        raise SandboxError(f"the sandboxed call's result could not be read: {exc}") from None
    if not (isinstance(outcome, tuple) and len(outcome) == 2):
        raise SandboxError("the sandboxed call's result is not an outcome")
    kind, value = outcome
    if kind == "error" and not isinstance(value, Exception):
        raise SandboxError(
            f"the sandboxed call raised {value!r}, which ends a process and is not raised here"
        )
    if kind not in ("ok", "error", "unservable"):
        raise SandboxError("the sandboxed call's result is not an outcome")
    return kind, value
