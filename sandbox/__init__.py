"""A general subprocess sandbox: runs a command or a Python callable in a child process
under limits, and says which protections it really enforced."""

__all__: list[str] = []
