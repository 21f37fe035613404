"""Differential tests of the providers' patch formats against their own reference executors:
openai-agents' ``apply_diff`` (V4A, the Responses API's ``apply_patch_call``), the
``codex-apply-patch`` port of Codex's envelope, and ``git apply`` for the diffs we emit.
Where the executors' semantics are defined the bytes must be equal; where we decide
otherwise on purpose, a test says so and names the README line."""
