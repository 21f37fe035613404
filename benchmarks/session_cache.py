"""What a cache hit costs next to running the call: read_file, grep and list_files.

Prints, per call kind, the median milliseconds of a run (cache off) and of a cache hit
(the fingerprint check: a content hash for read_file, one lstat per entry for discovery),
and their ratio. Run: ``python benchmarks/session_cache.py``.
"""

from __future__ import annotations

import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

from workspace_tools import ToolSession

FILES = 2000
LINES = 50
REPEATS = 15


def build_tree(root: Path) -> None:
    for i in range(FILES):
        directory = root / "src" / f"pkg{i % 40}"
        directory.mkdir(parents=True, exist_ok=True)
        body = "".join(f"value_{i}_{n} = {n}  # line {n}\n" for n in range(LINES))
        (directory / f"mod{i}.py").write_text(body)
    (root / "big.txt").write_text("".join(f"line {n} of a long file\n" for n in range(200_000)))


def median_ms(session: ToolSession, name: str, arguments: dict[str, Any]) -> float:
    times = []
    for _ in range(REPEATS):
        started = time.perf_counter()
        result = session.call_sync(name, arguments)
        times.append((time.perf_counter() - started) * 1000)
        if result.error is not None:
            raise SystemExit(f"{name} failed: {result.error}")
    return statistics.median(times)


def main() -> None:
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        build_tree(root)
        calls = [
            ("read_file", {"path": "src/pkg0/mod0.py"}),
            ("read_file", {"path": "big.txt"}),
            ("grep", {"pattern": r"value_\d+_7 ="}),
            ("list_files", {"path": "src", "recursive": True}),
        ]
        print(f"tree: {FILES} files of {LINES} lines, big.txt 200,000 lines; median of {REPEATS}")
        print(f"{'call':<40} {'run ms':>9} {'hit ms':>9} {'hit/run':>8}")
        for name, arguments in calls:
            run = median_ms(ToolSession(root, cache=False), name, arguments)
            cached = ToolSession(root)
            cached.call_sync(name, arguments)
            hit = median_ms(cached, name, arguments)
            assert all(step.cached for step in cached.steps[1:])
            label = f"{name} {arguments}"[:40]
            print(f"{label:<40} {run:>9.2f} {hit:>9.2f} {hit / run:>8.2f}")


if __name__ == "__main__":
    main()
