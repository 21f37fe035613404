"""Finding files and text: what discovery tools share, the grep pattern and its engines
(RE2, or Python's in a worker killed at the deadline), the matcher and the grep runner."""
