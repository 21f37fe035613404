"""Speed of grep, glob and list_files against ripgrep, on the same trees in one run.

Needs ripgrep: ``apt-get install ripgrep`` (Debian/Ubuntu) or ``brew install ripgrep``.
Run from the repository root: ``python benchmarks/bench_search.py``.

Two trees are built in a temporary directory, each a git repository:

(a) the installed Python standard library, copied, with a few ``.gitignore`` files;
(b) a generated tree of 50,000 small source files.

For each tree it prints the median wall time of warm, in-process tool calls
(``invoke_tool_sync``; grep without its warm index, see ``bench_grep.py``) and of the
ripgrep command doing the same job, and their ratio:
``grep`` of a literal and of a regex against ``rg --hidden``, ``glob("**/*.py")`` and
``list_files(recursive=True)`` against ``rg --files --hidden``. ripgrep is run with
``--hidden`` because the tools search hidden files too. Last it prints the process's peak
memory (max RSS).
"""

from __future__ import annotations

import os
import random
import resource
import shutil
import statistics
import subprocess
import sys
import sysconfig
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from workspace_tools import invoke_tool_sync, workspace_tools
from workspace_tools.search._index import SearchIndex
from workspace_tools.tools import grep as grep_tool
from workspace_tools.workspace import Workspace

RUNS = 9
# Walk caches are reused only for directories older than this (see workspace/_walk.py).
SETTLE_SECONDS = 2.1
WORDS = [
    "alpha",
    "beta",
    "gamma",
    "value",
    "result",
    "config",
    "parser",
    "handler",
    "request",
    "buffer",
    "stream",
    "token",
]


def _git(root: Path, *args: str) -> None:
    subprocess.run(["git", *args], cwd=root, check=True, capture_output=True)


def make_stdlib_tree(base: Path) -> Path:
    """The standard library in a git repository with a few .gitignore files."""
    root = base / "stdlib"
    shutil.copytree(sysconfig.get_paths()["stdlib"], root, symlinks=True)
    (root / ".gitignore").write_text("__pycache__/\n*.pyc\nsite-packages/\n")
    for sub, rules in (("email", "*.txt\n"), ("json", "!*.txt\ntool.py\n"), ("xml", "/dom/\n")):
        if (root / sub).is_dir():
            (root / sub / ".gitignore").write_text(rules)
    _git(root, "init", "-q")
    return root


def make_generated_tree(base: Path, files: int = 50_000) -> Path:
    """``files`` small Python-like sources in 50 x 10 directories, in a git repository."""
    root = base / "generated"
    rng = random.Random(4)
    per_dir = files // 500
    for top in range(50):
        for sub in range(10):
            d = root / f"pkg{top:02d}" / f"mod{sub}"
            d.mkdir(parents=True)
            for i in range(per_dir):
                name = f"file{i:03d}" + (".py" if i % 4 else ".txt")
                lines = [
                    f"def {rng.choice(WORDS)}_{j}(self, {rng.choice(WORDS)}):\n"
                    f"    return {rng.choice(WORDS)}.{rng.choice(WORDS)}({j})\n"
                    for j in range(rng.randint(5, 25))
                ]
                if rng.random() < 0.01:
                    lines.append("    raise NotImplementedError('needle')\n")
                (d / name).write_text("".join(lines))
    (root / ".gitignore").write_text("*.log\nbuild/\n")
    _git(root, "init", "-q")
    return root


def median_seconds(*fns: Callable[[], Any]) -> list[float]:
    """Median wall time of each function; runs alternate so that load on the machine
    weighs on all of them alike."""
    for fn in fns:
        fn()
    times: list[list[float]] = [[] for _ in fns]
    for _ in range(RUNS):
        for fn, bucket in zip(fns, times, strict=True):
            started = time.perf_counter()
            fn()
            bucket.append(time.perf_counter() - started)
    return [statistics.median(bucket) for bucket in times]


def rg(root: Path, *args: str) -> Callable[[], Any]:
    return lambda: subprocess.run(
        ["rg", "--hidden", *args], cwd=root, capture_output=True, check=False
    )


def tool_call(root: Path, name: str, **arguments: Any) -> Callable[[], Any]:
    tools = {t.name: t for t in workspace_tools(root)}
    if name == "grep":
        # Every file read, as on a first search: bench_grep.py measures the warm index.
        index = SearchIndex(str(root))
        index.close()
        tools[name] = grep_tool.build(Workspace(root), index=index)

    def run() -> Any:
        result = invoke_tool_sync(tools[name], arguments)
        if result.error:
            raise RuntimeError(result.error)
        return result

    return run


def bench_tree(title: str, root: Path, literal: str, regex: str) -> None:
    cases = [
        ("grep literal", tool_call(root, "grep", pattern=literal), rg(root, "-n", literal)),
        ("grep regex", tool_call(root, "grep", pattern=regex), rg(root, "-n", regex)),
        ("glob **/*.py", tool_call(root, "glob", pattern="**/*.py"), rg(root, "--files")),
        (
            "list_files recursive",
            tool_call(root, "list_files", recursive=True),
            rg(root, "--files"),
        ),
    ]
    listing = subprocess.run(["rg", "--hidden", "--files"], cwd=root, capture_output=True)
    files = len(listing.stdout.splitlines())
    print(f"\n{title}: {root} ({files:,} files as rg --files sees them)")
    print(f"  {'case':<22} {'tool ms':>9} {'rg ms':>9} {'ratio':>7}")
    for name, ours, theirs in cases:
        ours_s, theirs_s = median_seconds(ours, theirs)
        print(f"  {name:<22} {ours_s * 1000:9.1f} {theirs_s * 1000:9.1f} {ours_s / theirs_s:6.2f}x")


def run_all(base: Path) -> None:
    stdlib = base / "stdlib" if (base / "stdlib").is_dir() else make_stdlib_tree(base)
    generated = base / "generated" if (base / "generated").is_dir() else make_generated_tree(base)
    time.sleep(SETTLE_SECONDS)
    print(f"Python {sys.version.split()[0]}, {os.cpu_count()} CPUs, median of {RUNS} warm runs")
    bench_tree("(a) standard library", stdlib, "NotImplementedError", r"def \w+_\w+\(self, \w+\)")
    bench_tree("(b) generated tree", generated, "NotImplementedError", r"def \w+_1\d\(self, \w+\)")


def main() -> None:
    """Build the trees (or reuse them from the directory given as the only argument) and
    print the figures."""
    if shutil.which("rg") is None:
        sys.exit("ripgrep (rg) is needed: apt-get install ripgrep")
    if len(sys.argv) > 1:
        base = Path(sys.argv[1])
        base.mkdir(parents=True, exist_ok=True)
        run_all(base)
    else:
        with tempfile.TemporaryDirectory() as tmp:
            run_all(Path(tmp))
    peak_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(f"\npeak memory (max RSS of this process): {peak_mb:.0f} MB")


if __name__ == "__main__":
    main()
