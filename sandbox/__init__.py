"""A general subprocess sandbox: runs a command or a Python callable in a child process
under limits, and says which protections it really enforced.

Each public name is imported on first use: the spawn server and its workers import
``sandbox.spawn`` modules alone, so they start without the caller's side (the Sandbox
class, anyio, the layers' probes)."""

import lazy_loader

# The names and where each lives are in __init__.pyi, which type checkers read too.
__getattr__, __dir__, __all__ = lazy_loader.attach_stub(__name__, __file__)
