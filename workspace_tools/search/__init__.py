"""Finding files and text: what discovery tools share, the grep pattern and its engines
(RE2, or Python's in a searcher process killed at the deadline), the matcher, the grep
runner and grep's searcher processes."""
